"""``rbln-build explain --plot FILE``: the blocks-vs-budget curve and the per-chiplet stacks of one
model on one target, from ``explain``'s own numbers and the memory model's report; and ``rbln-build
plan --plot FILE``: a deployment's (or each card's) chiplets, one bar each, with the parts of the
report's deployment bars (``_deployments.chiplet_parts``). matplotlib is imported only when this
draws (``rbln_build.reporting`` itself imports it never)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..estimator import AllocationReport

__all__ = ["plot_deployment", "plot_explanation", "plot_format"]


def plot_format(command: str, path: Path) -> str:
    """``png`` or ``svg`` from the file's name (a UserError naming the command otherwise)."""
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise UserError(f"{command + ': ' if command else ''}--plot {path}: the file must end in .png or .svg.")
    return fmt


def plot_explanation(data: dict[str, Any], report: AllocationReport, path: Path) -> None:
    """Draw ``data`` (what ``explain`` returns) into ``path`` (.png or .svg)."""
    fmt = plot_format("explain", path)
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


def plot_deployment(title: str, cards: Sequence[tuple[str, dict[str, Any]]], path: Path, command: str = "") -> None:
    """Draw each card's chiplets (``cards``: a heading and a deployment record each, the report's
    shape) into ``path`` (.png or .svg): per chiplet one bar as long as its available DRAM, each model
    (named on its part when it is wide enough, and in the legend), the reservations, the margin, and
    the headroom left (its MiB at the bar's end)."""
    fmt = plot_format(command, path)
    from ..figures import require_matplotlib

    require_matplotlib()
    from ..figures import bytes_axis, new_figure, render, style
    from ._deployments import chiplet_label, chiplet_parts, model_colors

    names = list(dict.fromkeys(n for _, record in cards for n in record.get("models", {})))
    colors = model_colors(names)
    rows = [chiplet_parts(record, colors) for _, record in cards]
    with style():
        fig = new_figure(10.0, 1.0 + sum(0.45 * len(r) + 0.55 for r in rows))
        axes = fig.subplots(len(cards), 1, squeeze=False, height_ratios=[len(r) + 1 for r in rows])[:, 0]
        seen: dict[str, Any] = {}
        for ax, (heading, record), chiplets in zip(axes, cards, rows, strict=True):
            top = max((c.available for c in chiplets), default=1)
            for y, c in enumerate(chiplets):
                left = 0
                for label, nbytes, color in c.parts:
                    if nbytes <= 0:
                        continue
                    bar = ax.barh(y, nbytes, left=left, color=color, edgecolor="white", linewidth=0.5, label=label)
                    seen.setdefault(label, bar)
                    if label not in ("reserved", "margin") and nbytes >= 0.05 * top:
                        ax.text(left + nbytes / 2, y, label, ha="center", va="center", fontsize=6.5, color="white")
                    left += nbytes
                ax.barh(y, c.available, color="none", edgecolor="#555555", linewidth=0.8)
                room = f"{c.headroom // 2**20:,}" if c.headroom % 2**20 == 0 else f"{c.headroom / 2**20:,.2f}"
                ax.text(c.available, y, f" headroom {room} MiB", va="center", fontsize=7)
            ax.set_yticks(range(len(chiplets)), [chiplet_label(record, c) for c in chiplets], fontsize=7)
            ax.invert_yaxis()
            ax.set_xlim(0, top * 1.22)
            unit = bytes_axis(ax.xaxis, top)
            ax.set_xlabel(unit, fontsize=7)
            ax.set_title(heading, loc="left", fontsize=8.5)
        fig.suptitle(title, x=0.01, ha="left", fontsize=9.5)
        order = [n for n in [*names, "reserved", "margin"] if n in seen]  # the models first, as in the report
        fig.legend([seen[n] for n in order], order, loc="outside lower center", ncols=min(len(order), 6), fontsize=7)
    from ._cli import write_file

    try:
        write_file(Path(path), render(fig, fmt))
    except OSError as exc:
        where = f"{command}: " if command else ""
        raise UserError(f"{where}--plot {path}: cannot write it ({exc.strerror or exc}).") from None
