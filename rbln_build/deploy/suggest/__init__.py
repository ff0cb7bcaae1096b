"""Changes that make an infeasible deployment fit, each verified by planning again with it applied.

_change    a suggestion, and re-planning (counted, within a bound)
_single    single changes: each the smallest of its kind
_combine   two changes together, when no single one fits (bounded by ``PLAN_LIMIT`` plans)
"""

from __future__ import annotations

from ._change import MEASURE, Reshape, Retarget, Suggestion, Tally
from ._combine import PLAN_LIMIT, combinations
from ._single import fits_alone_on, suggestions

__all__ = [
    "MEASURE",
    "PLAN_LIMIT",
    "Reshape",
    "Retarget",
    "Suggestion",
    "Tally",
    "combinations",
    "fits_alone_on",
    "suggestions",
]
