"""Figures composed for one compile on one target: the report's pair (``group_figures``: blocks vs
budget, DRAM per chiplet) and explain's single picture (``explain_figure``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure

from ..figures import (
    BlocksCurve,
    DramCase,
    Point,
    blocks_curve,
    curve_figure,
    dram_figure,
    dram_stacks,
    draw_curve,
    draw_dram,
    keep_apart,
    new_figure,
    render,
    size_label,
    style,
    thin_labels,
    zoom_limit,
)
from ._data import Group, budget_label, outcome

__all__ = ["MAX_DRAM_CASES", "dram_cells", "explain_figure", "group_figures"]

MAX_DRAM_CASES = 8  # bar groups per DRAM figure; a long budget axis shows an even spread of its cells


def _spread(items: list[Any], limit: int) -> list[Any]:
    if len(items) <= limit:
        return items
    if limit <= 1:
        return items[:limit]
    picks = sorted({round(i * (len(items) - 1) / (limit - 1)) for i in range(limit)})
    return [items[i] for i in picks]


def dram_cells(cells: list[dict[str, Any]], limit: int = MAX_DRAM_CASES) -> list[dict[str, Any]]:
    """The cells a DRAM figure shows (budget order), the ones that matter first: the last one below
    the floor (drawn at the floor: the shortfall), the first at the full pool, and the cut ones (an
    even spread when there are more than fit); the rest of ``limit`` is an even spread of the others."""
    cells = [e for e in cells if e["budget_bytes"] is not None]
    if len(cells) <= limit:
        return cells
    failed = [e for e in cells if e["kvcache_num_blocks"] is None]
    full = [e for e in cells if e["kvcache_num_blocks"] is not None and e["kvcache_num_blocks"] == e["num_full_blocks"]]
    cut = [e for e in cells if e["kvcache_num_blocks"] is not None and e not in full]
    must = failed[-1:] + full[:1]
    chosen = must + _spread(cut, limit - len(must))
    others = [e for e in cells if e not in chosen]
    chosen += _spread(others, limit - len(chosen))
    return sorted(chosen, key=cells.index)


def group_figures(group: Group) -> tuple[bytes, bytes]:
    """(curve PNG, DRAM PNG) of one group. Raises EstimateError if its report does not fit its cells."""
    assert group.report is not None
    curve = blocks_curve(group.report, group.npu, group.num_devices, group.attention)
    points = [
        Point(budget_label(e["memory_budget"]), e["budget_bytes"], e["kvcache_num_blocks"], outcome(e))
        for e in group.cells
        if e["budget_bytes"] is not None and not e["inputs"].get("kvcache_num_blocks")
    ]
    title = f"{group.model} on {group.device}: {group.num_devices} x {group.npu}"
    curve_png = render(curve_figure(curve, points, title))
    cases = []
    for e in dram_cells(group.cells):
        blocks, short = e["kvcache_num_blocks"], False
        if blocks is None:
            blocks, short = curve.num_min_blocks, True
        stacks = dram_stacks(group.report, blocks)
        nodes = {s.node for s in stacks}
        if all(
            tuple(s.parts.items()) == tuple(t.parts.items()) for s in stacks for t in stacks if s.chiplet == t.chiplet
        ):
            stacks = [s for s in stacks if s.node == min(nodes)]
        label = f"{budget_label(e['memory_budget'])}\n" + (f"fails (floor {blocks})" if short else f"{blocks} blocks")
        cases.append(DramCase(label, e["budget_bytes"], tuple(stacks), short))
    shown = "each device (identical)" if group.num_devices > 1 else "the device"
    dram_png = render(
        dram_figure(cases, curve.num_chiplets, curve.available_bytes, f"where the DRAM goes, per chiplet of {shown}")
    )
    return curve_png, dram_png


def explain_figure(curve: BlocksCurve, points: Sequence[Point], cases: Sequence[DramCase], title: str) -> Figure:
    """``explain --plot``: the curve (zoomed when the steps sit in a sliver of the device) and the stacks."""
    zoom = zoom_limit(curve)
    if zoom is not None and points:  # the requested budgets are always on the picture
        zoom = max(zoom, int(max(p.budget_bytes for p in points) * 1.08) + 1)
        zoom = None if zoom >= 0.3 * curve.available_bytes else zoom
    with style():
        fig = new_figure(12.0, 4.0)
        left, right = fig.subplots(1, 2)
        points_labels = draw_curve(
            left,
            curve,
            points,
            zoom or curve.available_bytes,
            "blocks vs budget" + (f" (zoomed; the device has {size_label(curve.available_bytes)})" if zoom else ""),
            what="budgets",
        )
        left.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=6.5)
        labels = draw_dram(right, cases, curve.num_chiplets, curve.available_bytes, "where the DRAM goes (device 0)")
        right.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=6.5)
        fig.suptitle(title, x=0.01, ha="left", fontsize=10)
        keep_apart(fig, labels)
        thin_labels(fig, points_labels)
    return fig
