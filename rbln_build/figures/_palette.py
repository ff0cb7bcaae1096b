"""The report's colors and glyphs per outcome and memory part: plain data, no matplotlib, so a page
whose figures are all cached (``_figcache``) is written without importing it."""

from __future__ import annotations

__all__ = ["GRID_COLORS", "OUTCOME_COLORS", "OUTCOME_GLYPHS", "OUTCOME_MARKERS", "PART_COLORS", "PART_LABELS"]

# Status colors, safe for color-blind readers: a blue / yellow / red / near-black / light-gray set
# whose members stay apart under simulated deuteranopia and protanopia (tests/test_reporting.py
# checks the pixels), and a glyph per status wherever a square is large enough to hold one.
OUTCOME_COLORS = {  # points on the curves, squares of the grid picture
    "full_pool": "#2166ac",
    "cut": "#fdd870",
    "failed": "#b2182b",
    "unexpected_success": "#1b1b1b",
    "expected_failure": "#d9d9d9",
}
OUTCOME_GLYPHS = {  # drawn on the grid picture's squares and written in the page's grid
    "full_pool": "\u25cf",  # ● at the full pool
    "cut": "\u25d0",  # ◐ part of the pool
    "failed": "\u2717",  # ✗
    "unexpected_success": "!",
    "expected_failure": "\u2013",  # – failed, as declared
}
OUTCOME_MARKERS = {"full_pool": "o", "cut": "D", "failed": "X", "unexpected_success": "s", "expected_failure": "P"}
GRID_COLORS = {  # the page's table colors: light tints of the same hues, black text on them
    "full_pool": "#c6dbef",
    "cut": "#fde9a9",
    "failed": "#f4b6b6",
    "unexpected_success": "#9e9e9e",
    "expected_failure": "#eeeeee",
}
PART_COLORS = {
    "weights": "#4e79a7",
    "workspace": "#f28e2b",
    "runtime_buffers": "#76b7b2",
    "other": "#bab0ac",
    "kv": "#59a14f",
}
PART_LABELS = {
    "weights": "weights",
    "workspace": "workspace",
    "runtime_buffers": "runtime buffers",
    "other": "other",
    "kv": "KV cache",
}
