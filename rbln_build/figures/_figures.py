"""The report's figures, drawn with matplotlib's Agg canvas, byte-identical from run to run.

Determinism: every figure is drawn inside an rc context reset to matplotlib's own defaults (a
user's matplotlibrc cannot change a pixel), with the DejaVu Sans font matplotlib ships (pinned by
file, so a font cache built elsewhere that lists a system DejaVu first, or lacks the shipped one,
cannot swap it: see ``_pin_shipped_font``), a fixed
size and DPI, a fixed ``svg.hashsalt``, and the writer's metadata stripped (no "Software",
"Creator" or "Date"). pyplot is never imported: figures are plain ``Figure`` objects on their own
Agg canvas, so nothing global (a GUI backend, a figure manager) is touched.

matplotlib is an optional dependency (``pip install 'rbln-build[report]'``); importing this module
without it raises ``MissingExtra``.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from ._curve import BlocksCurve
from ._palette import GRID_COLORS, OUTCOME_COLORS, OUTCOME_GLYPHS, OUTCOME_MARKERS, PART_COLORS, PART_LABELS

__all__ = [
    "GRID_COLORS",
    "OUTCOME_GLYPHS",
    "MissingExtra",
    "OUTCOME_COLORS",
    "PART_COLORS",
    "PART_LABELS",
    "Point",
    "bytes_axis",
    "curve_figure",
    "draw_curve",
    "new_figure",
    "render",
    "require_matplotlib",
    "size_label",
    "style",
    "thin_labels",
    "zoom_limit",
]


class MissingExtra(UserError):
    """matplotlib is not installed."""


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingExtra(
            "matplotlib is not installed here, and `rbln-build report` and `explain --plot` draw their figures "
            "with it. Install the optional extra: pip install 'rbln-build[report]' (or pip install matplotlib)."
        ) from None


require_matplotlib()

import matplotlib  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator  # noqa: E402

DPI = 100
FIXED_RC: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 8.5,
    "axes.titlesize": 9.5,
    "svg.hashsalt": "rbln-build",
    "svg.fonttype": "path",
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}}

GiB, MiB = 2**30, 2**20


@dataclass(frozen=True)
class Point:
    """One cell (or one explain budget) on the curve: its budget bytes per device and its outcome."""

    label: str
    budget_bytes: int
    blocks: int | None  # resolved count, None when the estimator failed
    outcome: str  # a key of OUTCOME_COLORS


_pinned: Any = None  # the FontManager whose font list starts with the shipped DejaVu Sans


def _pin_shipped_font() -> None:
    """Put the DejaVu Sans files in matplotlib's own mpl-data first in the font list.

    matplotlib finds "DejaVu Sans" by scoring the entries of its font cache (``fontlist-*.json``
    under MPLCONFIGDIR, often ~/.cache/matplotlib, shared by every matplotlib on the machine) and
    takes the first best one. A cache written by another matplotlib (a distribution's, which ships
    no fonts, or one that listed /usr/share/fonts first) then picks the system's DejaVu, another
    build of the font with other outlines, and the figures' bytes change. Adding the shipped files
    (``addfont``, which also clears the lookup cache) and moving them to the front makes them win
    every tie, whatever the cache held. Done once per font manager (matplotlib replaces it when it
    rebuilds the cache)."""
    global _pinned
    from matplotlib import font_manager

    manager = font_manager.fontManager
    if manager is _pinned:
        return
    folder = Path(matplotlib.get_data_path(), "fonts", "ttf")
    before = len(manager.ttflist)
    for path in sorted(folder.glob("DejaVuSans*.ttf")):
        manager.addfont(path)
    # no lookup ran since the last addfont cleared its cache, so reordering needs no clearing
    shipped = manager.ttflist[before:]
    manager.ttflist[:] = shipped + manager.ttflist[:before]
    _pinned = manager


@contextmanager
def style() -> Iterator[None]:
    _pin_shipped_font()
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        params: Any = matplotlib.rcParams  # typed for literal keys only
        params.update(FIXED_RC)
        yield


def render(fig: Figure, fmt: str = "png") -> bytes:
    """The figure's bytes in ``fmt`` (png or svg), without any metadata that varies."""
    if fmt not in METADATA:
        raise UserError(f"cannot write a .{fmt} figure; use a .png or .svg file name.")
    buf = io.BytesIO()
    with style():
        fig.savefig(buf, format=fmt, dpi=DPI, metadata=METADATA[fmt])
    return buf.getvalue()


def new_figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas; call inside ``style()`` (a figure reads rcParams when made)."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _unit(top: float) -> tuple[int, str]:
    return (GiB, "GiB") if top >= 2 * GiB else (MiB, "MiB")


def bytes_axis(axis: Any, top: float) -> str:
    """Ticks at round numbers of GiB (or MiB) on an axis whose data are bytes, from 0 to ``top``."""
    unit, name = _unit(top)
    values = MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]).tick_values(0, top / unit)
    axis.set_major_locator(FixedLocator([v * unit for v in values if 0 <= v * unit <= top]))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v / unit:,.4g}"))
    return name


def size_label(n: int) -> str:
    """Bytes in the unit that reads: GiB from 1 GiB on, MiB below (``0.20 GiB`` reads ``204.80 MiB``)."""
    unit, name = (GiB, "GiB") if n >= GiB else (MiB, "MiB")
    return f"{n / unit:,.2f} {name}"


def _curve_xy(curve: BlocksCurve, xmax: int) -> tuple[list[int], list[int]]:
    xs = [x for x, _ in curve.steps if x <= xmax]
    ys = [y for x, y in curve.steps if x <= xmax]
    return xs + [xmax], ys + [ys[-1]]


def draw_curve(
    ax: Any, curve: BlocksCurve, points: Sequence[Point], xmax: int, title: str, what: str = "cells"
) -> list[Any]:
    """The step curve on ``ax`` from 0 to ``xmax`` bytes per device; the line labelled
    "kvcache_num_blocks" holds the exact vertices (drawn post-step). Returns the points' labels
    (``thin_labels`` drops those that would overprint, once the figure is composed)."""
    labels: list[Any] = []
    xs, ys = _curve_xy(curve, xmax)
    if curve.eager:
        ax.step(xs, ys, where="post", color="#9e9e9e", ls="--", lw=1, label="blocks that fit")
        ax.plot([0, xmax], [curve.num_full_blocks] * 2, color="#1f4e9c", lw=1.8, label="kvcache_num_blocks")
    else:
        ax.step(xs, ys, where="post", color="#1f4e9c", lw=1.8, label="kvcache_num_blocks")
        if curve.floor_bytes is not None and curve.floor_bytes > 0:
            ax.axvspan(
                0, min(curve.floor_bytes, xmax), color="#c62828", alpha=0.07, lw=0, label="below the floor: error"
            )
    for value, blocks, name, ls in (
        (curve.floor_bytes, curve.num_min_blocks, "floor", ":"),
        (curve.full_bytes, curve.num_full_blocks, "full pool", "--"),
    ):
        if value is not None and value <= xmax:
            ax.axvline(value, color="#555555", ls=ls, lw=1, label=f"{name}: {blocks} blocks from {size_label(value)}")
    for outcome in OUTCOME_COLORS:
        mine = [p for p in points if p.outcome == outcome and p.budget_bytes <= xmax]
        if not mine:
            continue
        py = [curve.fitting_at(p.budget_bytes) if p.blocks is None else p.blocks for p in mine]
        ax.scatter(
            [p.budget_bytes for p in mine],
            py,
            marker=OUTCOME_MARKERS[outcome],
            s=40,
            zorder=3,
            color=OUTCOME_COLORS[outcome],
            edgecolors="black",
            linewidths=0.6,
            label=f"{what}: {outcome.replace('_', ' ')}",
        )
        if len(points) <= 12:
            for p, y in zip(mine, py, strict=True):
                right = p.budget_bytes > 0.9 * xmax  # at the right edge: the label to the left of its point
                labels.append(
                    ax.annotate(
                        p.label,
                        (p.budget_bytes, y),
                        textcoords="offset points",
                        xytext=(-4 if right else 4, -9),
                        ha="right" if right else "left",
                        fontsize=6.5,
                    )
                )
    unit = bytes_axis(ax.xaxis, xmax)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
    ax.set_xlim(0, xmax)
    ax.set_ylim(0, curve.num_full_blocks * 1.08 + 0.5)
    ax.set_xlabel(f"memory_budget per device ({unit})")
    ax.set_ylabel("kvcache_num_blocks")
    ax.set_title(title, loc="left")
    ax.grid(True, color="#e0e0e0", lw=0.6)
    return labels


def thin_labels(fig: Figure, labels: Sequence[Any]) -> None:
    """Hide the point labels that would overprint one already kept (kept from the lowest budget up)."""
    if len(labels) < 2:
        return
    fig.draw_without_rendering()  # the final layout: the labels' places
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    kept: list[Any] = []
    for label in sorted(labels, key=lambda t: t.xy[0]):
        box = label.get_window_extent(renderer)
        if any(box.overlaps(k) for k in kept):
            label.set_visible(False)
        else:
            kept.append(box)


def zoom_limit(curve: BlocksCurve) -> int | None:
    """Where a zoomed panel should end when the steps sit in a sliver of the device (else None)."""
    last = curve.full_bytes or curve.steps[-1][0]
    if last and last < 0.3 * curve.available_bytes:
        return min(curve.available_bytes, int(last * 1.25) + 1)
    return None


def _legend_entries(axes: Sequence[Any]) -> tuple[list[Any], list[str]]:
    """Every labelled artist of ``axes``, once per label, in drawing order."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    return list(handles.values()), list(handles)


def curve_figure(curve: BlocksCurve, points: Sequence[Point], title: str) -> Figure:
    zoom = zoom_limit(curve)
    with style():
        fig = new_figure(10.0 if zoom else 7.5, 3.4)
        axes = fig.subplots(1, 2 if zoom else 1, squeeze=False)[0]
        labels = draw_curve(axes[0], curve, points, curve.available_bytes, "the whole device")
        if zoom:
            labels += draw_curve(axes[1], curve, points, zoom, "zoom: where the steps are")
        fig.suptitle(f"blocks vs budget: {title}", x=0.01, ha="left", fontsize=9.5)
        fig.legend(*_legend_entries(axes), loc="outside right upper", fontsize=7)
        thin_labels(fig, labels)
    return fig
