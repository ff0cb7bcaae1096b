"""The report's and ``explain --plot``'s figures, and the numbers behind them.

_curve      the exact blocks-vs-budget step curve and the per-chiplet DRAM stacks (estimator only)
_figures    matplotlib (Agg) figures, byte-identical from run to run; the curve
_bars       the DRAM bars per chiplet and the matrix grid as a picture
_figcache   figures drawn once and reused (``<build_dir>/report/.figures``)

Imports only ``rbln_build.estimator`` and ``rbln_build.errors``; matplotlib (the ``report`` extra)
is imported only when a figure is drawn.
"""

from __future__ import annotations

from ._curve import BlocksCurve, ChipletStack, blocks_curve, dram_stacks

__all__ = ["BlocksCurve", "ChipletStack", "blocks_curve", "dram_stacks"]
