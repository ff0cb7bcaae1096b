"""``rbln-build explain --plot FILE``: the blocks-vs-budget curve and the per-chiplet stacks of one
model on one target, from ``explain``'s own numbers and the memory model's report. matplotlib is
imported only when this draws (``rbln_build.reporting`` itself imports it never)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UserError
from ..estimator import AllocationReport

__all__ = ["plot_explanation"]


def plot_explanation(data: dict[str, Any], report: AllocationReport, path: Path) -> None:
    """Draw ``data`` (what ``explain`` returns) into ``path`` (.png or .svg)."""
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise UserError(f"explain: --plot {path}: the file must end in .png or .svg.")
    from ..figures import blocks_curve, dram_stacks, require_matplotlib
    from ._cli import write_file
    from ._data import budget_label

    require_matplotlib()
    from ..figures import DramCase, Point, render
    from ._compose import explain_figure

    curve = blocks_curve(report, data["npu"], data["num_devices"], data["attention"])
    points, cases = [], []
    for row in data["budgets"]:
        if row["budget_bytes"] is None:
            continue  # rejected before it resolved to bytes (e.g. above the device)
        label, blocks = budget_label(row["budget"]), row["kvcache_num_blocks"]
        if blocks is None:
            kind = "failed"
        else:
            kind = "full_pool" if blocks == curve.num_full_blocks else "cut"
        points.append(Point(label, row["budget_bytes"], blocks, kind))
        short = blocks is None
        count = curve.num_min_blocks if short else blocks
        stacks = tuple(s for s in dram_stacks(report, count) if s.node == 0)
        cases.append(
            DramCase(
                f"{label}\n" + (f"fails (floor {count})" if short else f"{count} blocks"),
                row["budget_bytes"],
                stacks,
                short,
            )
        )
    title = (
        f"{data['model']} on {data['device']}: {data['num_devices']} x {data['npu']}; "
        f"full pool {curve.num_full_blocks} blocks, floor {curve.num_min_blocks} (model-based estimate)"
    )
    try:
        write_file(Path(path), render(explain_figure(curve, points, cases, title), fmt))
    except OSError as exc:
        raise UserError(f"explain: --plot {path}: cannot write it ({exc}).") from None
