"""The bar figures: each chiplet's DRAM (``dram_figure``) and the matrix grid as a picture
(``grid_figure``), drawn as deterministically as every figure (``_figures``)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure

from ._curve import STACK_PARTS, ChipletStack
from ._figures import (
    DPI,
    OUTCOME_COLORS,
    OUTCOME_GLYPHS,
    PART_COLORS,
    PART_LABELS,
    bytes_axis,
    new_figure,
    size_label,
    style,
)

__all__ = ["DramCase", "draw_dram", "dram_figure", "grid_figure", "keep_apart"]


@dataclass(frozen=True)
class DramCase:
    """One bar group: the chiplets' stacks at one block count, against one budget."""

    label: str
    budget_bytes: int | None  # per device (None: no budget line)
    stacks: tuple[ChipletStack, ...]
    short: bool = False  # a failed cell: the stacks are at the floor, which does not fit


def draw_dram(ax: Any, cases: Sequence[DramCase], num_chiplets: int, available_bytes: int, title: str) -> list[Any]:
    """Bar groups, one per case; in each, one stacked bar per (node, chiplet) shown. Returns the
    labels under the groups: once the figure is composed, ``keep_apart`` makes sure they never overprint."""
    per_chiplet_available = available_bytes // num_chiplets
    tops = [s.total for c in cases for s in c.stacks] or [1]
    budgets = [c.budget_bytes // num_chiplets for c in cases if c.budget_bytes is not None]
    top = max(tops)
    scale_top = max(
        [top]
        + [b for b in budgets if b <= 4 * top]
        + ([per_chiplet_available] if per_chiplet_available <= 4 * top else [])
    )
    x, ticks, tick_labels, group_mid = 0.0, [], [], []
    off_scale: dict[int, str] = {}  # case index -> its budget, above the axis (said in its label)
    seen: set[str] = set()
    for case in cases:
        first = x
        for stack in case.stacks:
            bottom = 0
            for part in STACK_PARTS:
                value = stack.parts.get(part, 0)
                if value:
                    key = part + ("-short" if case.short and part == "kv" else "")
                    label = (
                        None
                        if key in seen
                        else PART_LABELS[part] + (" at the floor (does not fit)" if key != part else "")
                    )
                    seen.add(key)
                    ax.bar(
                        x,
                        value,
                        bottom=bottom,
                        width=0.7,
                        color=PART_COLORS[part],
                        label=label,
                        hatch="//" if case.short and part == "kv" else None,
                        edgecolor="white",
                        lw=0.3,
                    )
                    bottom += value
            ticks.append(x)
            tick_labels.append(
                f"n{stack.node}c{stack.chiplet}" if len(case.stacks) > num_chiplets else f"c{stack.chiplet}"
            )
            x += 1
        group_mid.append(((first + x - 1) / 2, case))
        if case.budget_bytes is not None:
            line = case.budget_bytes // num_chiplets
            shown = min(line, scale_top * 1.12)
            ax.plot(
                [first - 0.45, x - 0.55],
                [shown, shown],
                color="black",
                lw=1.4,
                ls="-" if line == shown else ":",
                label="budget per chiplet" if "budget" not in seen else None,
            )
            seen.add("budget")
            if line != shown:
                off_scale[len(group_mid) - 1] = f"\nbudget {size_label(line)} ↑"
        x += 0.8
    if per_chiplet_available <= scale_top * 1.12:
        ax.axhline(
            per_chiplet_available,
            color="#c62828",
            ls="--",
            lw=1,
            label=f"available per chiplet ({size_label(per_chiplet_available)})",
        )
    else:
        note = f"available per chiplet: {size_label(per_chiplet_available)} (far above the bars)"
        title = f"{title}; {note}" if title else note
    ax.set_ylim(0, scale_top * 1.22)
    ax.set_xticks(ticks, tick_labels, fontsize=6.5)
    labels = []
    for i, (mid, case) in enumerate(group_mid):
        label = ax.annotate(
            case.label + off_scale.get(i, ""),
            (mid, 0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -22),
            textcoords="offset points",
            ha="center",
            va="top",
            fontsize=7,
            color=OUTCOME_COLORS["failed"] if case.short else "black",
        )
        labels.append(label)
    unit = bytes_axis(ax.yaxis, scale_top * 1.22)
    ax.set_ylabel(f"DRAM per chiplet ({unit})")
    ax.set_title(title, loc="left", fontsize=8)
    return labels


def keep_apart(fig: Figure, labels: Sequence[Any]) -> None:
    """Labels under bar groups (``draw_dram``'s) that overprint one another in the composed ``fig``
    (a group is narrower than its label: many budgets, a half-width panel) are set on two (up to four)
    alternating rows, with a font shrinking to 5 pt, until none touches another. Chiplet names under the
    bars that touch are left out, and the title says the bars' order instead."""

    def clash(texts: Sequence[Any] = labels) -> list[Any] | None:
        fig.draw_without_rendering()  # the final layout: the labels' places
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        boxes = [t.get_window_extent(renderer) for t in texts]
        return boxes if any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2)) else None

    if not labels:
        return
    ax = labels[0].axes
    ticks = [t for t in ax.get_xticklabels() if t.get_text()]
    if clash(ticks) is not None:
        order = ", ".join(dict.fromkeys(t.get_text() for t in ticks))
        ax.set_xticks(ax.get_xticks(), [""] * len(ax.get_xticks()))
        ax.set_title(f"{ax.get_title(loc='left')}\nthe bars of a group: {order}", loc="left", fontsize=8)
    boxes = clash() if len(labels) > 1 else None
    if boxes is None:
        return
    row = max(b.height for b in boxes) * 72 / fig.dpi + 3  # points, at the first font size
    first = [label.xyann for label in labels]
    for rows in (2, 3, 4):
        for size in (7.0, 6.5, 6.0, 5.5, 5.0):
            for i, label in enumerate(labels):
                label.set_fontsize(size)
                x, y = first[i]
                label.xyann = (x, y - (i % rows) * row * size / 7.0)
            if clash() is None:
                return


def dram_figure(cases: Sequence[DramCase], num_chiplets: int, available_bytes: int, title: str) -> Figure:
    bars = sum(len(c.stacks) for c in cases)
    with style():
        # wide enough that each case's label (about 1.1 in at 7 pt) has its own room under its bars
        room = max(0.3 * bars + 0.25 * len(cases), 1.15 * len(cases))
        fig = new_figure(min(14.0, max(7.0, 3.6 + room)), 3.8)
        ax = fig.subplots()
        labels = draw_dram(ax, cases, num_chiplets, available_bytes, "")
        fig.suptitle(title, x=0.01, ha="left", fontsize=9.5)
        fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize=7)
        keep_apart(fig, labels)
    return fig


_MARK_LINES: dict[str, Any] = {"changed": "-", "added": (0, (2, 1))}  # report --compare: solid, dashed


def grid_figure(
    rows: Sequence[str],
    columns: Sequence[str],
    outcomes: Sequence[Sequence[str | None]],
    title: str,
    marks: Sequence[Sequence[str | None]] | None = None,
) -> Figure:
    """The matrix grid as a picture, for budget axes too long for a table: one square per cell in
    its status color (white: no such cell), with the status glyph on it when the squares are large
    enough, rows top to bottom, columns in budget order, and a legend of colors and glyphs.
    ``marks`` (``report --compare``): per square "changed", "added" or None; a changed square is
    outlined (black, inside white, so it shows on every fill), an added one outlined dashed."""
    from matplotlib.colors import ListedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    names = list(OUTCOME_COLORS)
    codes = [[0 if o is None else 1 + names.index(o) for o in row] for row in outcomes]
    width, height = 10.0, 1.6 + 0.28 * len(rows)
    with style():
        fig = new_figure(width, height)
        ax = fig.subplots()
        cmap = ListedColormap(["#ffffff"] + [OUTCOME_COLORS[n] for n in names])
        ax.imshow(codes, cmap=cmap, vmin=0, vmax=len(names), aspect="auto", interpolation="nearest")
        # a glyph per square when a square is at least ~9 px wide (the axes take about 75% of the width)
        if len(columns) <= width * 0.75 * DPI / 9:
            for r, row in enumerate(outcomes):
                for c, o in enumerate(row):
                    if o is not None:
                        ink = "white" if o in ("full_pool", "failed", "unexpected_success") else "black"
                        ax.text(c, r, OUTCOME_GLYPHS[o], ha="center", va="center", fontsize=6, color=ink)
        for r, row in enumerate(marks or ()):
            for c, mark in enumerate(row):
                if mark is not None:
                    style_ = _MARK_LINES[mark]
                    for inset, color, lw in ((0.06, "black", 1.6), (0.2, "white", 0.8)):
                        side = 1 - 2 * inset
                        box = Rectangle((c - 0.5 + inset, r - 0.5 + inset), side, side, fill=False, lw=lw)
                        box.set(edgecolor=color, linestyle=style_, zorder=3)
                        ax.add_patch(box)
        ax.set_yticks(range(len(rows)), rows, fontsize=7)
        ticks = _even(len(columns), 12)
        ax.set_xticks(ticks, [columns[i] for i in ticks], fontsize=7, rotation=30, ha="right", rotation_mode="anchor")
        ax.set_xlabel("memory_budget (columns in budget order, by bytes per device)")
        for spine in ax.spines.values():
            spine.set_visible(False)
        shown = [n for n in names if any(n in row for row in outcomes)]
        handles: list[Any] = [
            Patch(facecolor=OUTCOME_COLORS[n], edgecolor="#555555", label=f"{OUTCOME_GLYPHS[n]} {n.replace('_', ' ')}")
            for n in shown
        ]
        for kind, text in (("changed", "\u0394 changed"), ("added", "+ added")):
            if any(kind in row for row in marks or ()):
                handles.append(Line2D([], [], color="black", linestyle=_MARK_LINES[kind], lw=1.6, label=text))
        fig.legend(handles=handles, loc="outside upper right", ncols=len(handles), fontsize=7, frameon=False)
        fig.suptitle(title, x=0.01, ha="left", fontsize=9.5)
    return fig


def _even(n: int, most: int) -> list[int]:
    """At most ``most`` indexes of ``range(n)`` spread evenly, the first and the last included."""
    if n <= most:
        return list(range(n))
    return sorted({round(i * (n - 1) / (most - 1)) for i in range(most)})
