"""The report's and ``explain --plot``'s figures, and the numbers behind them.

_curve      the exact blocks-vs-budget step curve and the per-chiplet DRAM stacks (estimator only)
_figures    matplotlib (Agg) figures, byte-identical from run to run; the curve
_bars       the DRAM bars per chiplet and the matrix grid as a picture
_figcache   figures drawn once and reused (``<build_dir>/report/.figures``)
_palette    the colors and glyphs per outcome and memory part (no matplotlib)

Imports only ``rbln_build.estimator`` and ``rbln_build.errors``. matplotlib is an optional extra
(``report``): the drawing names (from ``_figures`` and ``_bars``) are loaded on first use, so
importing this package, the curve and the figure cache never import it; asking for a drawing name
without matplotlib raises ``MissingExtra`` with the install hint.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._curve import STACK_PARTS, BlocksCurve, ChipletStack, blocks_curve, dram_stacks, request_for
from ._figcache import FIGURES_DIR, FigureCache
from ._palette import GRID_COLORS, OUTCOME_COLORS, OUTCOME_GLYPHS

if TYPE_CHECKING:
    from ._bars import DramCase, dram_figure, draw_dram, grid_figure, keep_apart
    from ._figures import (
        MissingExtra,
        Point,
        bytes_axis,
        curve_figure,
        draw_curve,
        new_figure,
        render,
        require_matplotlib,
        size_label,
        style,
        thin_labels,
        zoom_limit,
    )

_DRAWING = {
    **dict.fromkeys(["DramCase", "draw_dram", "dram_figure", "grid_figure", "keep_apart"], "_bars"),
    **dict.fromkeys(
        [
            "MissingExtra",
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
        ],
        "_figures",
    ),
}

__all__ = [
    "BlocksCurve",
    "ChipletStack",
    "DramCase",
    "FIGURES_DIR",
    "FigureCache",
    "GRID_COLORS",
    "MissingExtra",
    "OUTCOME_COLORS",
    "OUTCOME_GLYPHS",
    "Point",
    "STACK_PARTS",
    "blocks_curve",
    "bytes_axis",
    "curve_figure",
    "dram_figure",
    "dram_stacks",
    "draw_curve",
    "draw_dram",
    "grid_figure",
    "keep_apart",
    "new_figure",
    "render",
    "request_for",
    "require_matplotlib",
    "size_label",
    "style",
    "thin_labels",
    "zoom_limit",
]


def __getattr__(name: str) -> Any:
    """A drawing name, imported on first use (its module imports matplotlib)."""
    module = _DRAWING.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
