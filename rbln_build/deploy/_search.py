"""The exact search behind the planner (``rbln_build.deploy._planner``), over per-model options.

Each planned model has options ``(count, cost)`` in ascending count, costs non-decreasing in every
dimension (one dimension, a chiplet's share, for the budget plan; one per (node, chiplet) for the
blocks plan), and the room left after the reservations and the fixed models.

* ``max_min_start`` (step 1): the largest smallest share ``count / full pool``. For a threshold s
  each model needs its first option with ``count >= ceil(s * full)``; fitting is monotone in s, so
  a binary search over the candidate shares finds the best s exactly.
* ``branch_and_bound`` (steps 2-4): among the options at or above that threshold, the largest
  (weighted share, total blocks), searched depth first over the models in their listed order and
  their counts from high to low. The bound for the models not yet placed is each one's best count
  alone in the room the others' cheapest options leave, which is never below what they can reach
  together; a subtree whose bound does not beat the best plan so far is cut, so the first best plan
  found is also the lexicographically largest count vector among the best (the tie-break).

Integers and exact fractions only.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from ._inputs import Demand, ceil_div

__all__ = ["Vector", "SearchLimit", "fits", "max_min_start", "branch_and_bound"]

Vector = tuple[int, ...]


class SearchLimit(Exception):
    """The search passed its node limit (the caller turns it into an error; it never approximates)."""


def fits(room: Vector, costs: Sequence[Vector]) -> bool:
    left = list(room)
    for cost in costs:
        for k, c in enumerate(cost):
            left[k] -= c
    return all(x >= 0 for x in left)


def max_min_start(
    planned: Sequence[Demand], options: Sequence[list[tuple[int, Vector]]], room: Vector
) -> list[int] | None:
    """Step 1: the largest smallest share. For a threshold share s each model needs its first option
    with ``count >= ceil(s * full)``; fitting is monotone in s, so a binary search over the candidate
    shares finds the best one. Returns each model's first admissible option index, or None when not
    even the lower bounds fit."""
    counts = [[n for n, _ in opts] for opts in options]

    def start_at(share: Fraction) -> list[int]:
        return [
            bisect.bisect_left(cs, ceil_div(share.numerator * d.tenant.full, share.denominator))
            for d, cs in zip(planned, counts, strict=True)
        ]

    def ok(start: list[int]) -> bool:
        return fits(room, [opts[s][1] for opts, s in zip(options, start, strict=True)])

    if not ok([0] * len(options)):
        return None
    shares = sorted({Fraction(n, d.tenant.full) for d, cs in zip(planned, counts, strict=True) for n in cs})
    lo, hi = 0, len(shares) - 1  # shares[lo] is admissible: every model at its first option
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(start_at(shares[mid])):
            lo = mid
        else:
            hi = mid - 1
    return start_at(shares[lo]) if shares else [0] * len(options)


def branch_and_bound(
    planned: Sequence[Demand], choices: Sequence[list[tuple[int, Vector]]], room: Vector, limit: int
) -> tuple[list[int], int]:
    """Steps 2-4: maximize (weighted share, total blocks) over the admissible counts; the first best
    plan in depth-first order (models in listed order, counts high to low) is the lexicographically
    largest count vector among the best, which is the tie-break."""
    m, dims = len(choices), len(room)
    # Weighted shares as integers: weight / full over a common denominator.
    coefs = [d.tenant.weight / d.tenant.full for d in planned]
    scale = math.lcm(*(c.denominator for c in coefs)) if coefs else 1
    value = [int(c * scale) for c in coefs]
    least = [opts[0][1] for opts in choices]
    suffix = [[0] * dims for _ in range(m + 1)]
    for i in reversed(range(m)):
        suffix[i] = [a + b for a, b in zip(suffix[i + 1], least[i], strict=True)]
    best: list[Any] = [None, None]  # (key, counts)
    counts = [0] * m
    nodes = [0]

    def best_alone(j: int, budget: list[int]) -> int | None:
        opts = choices[j]
        lo, hi, found = 0, len(opts) - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            if all(c <= b for c, b in zip(opts[mid][1], budget, strict=True)):
                found, lo = opts[mid][0], mid + 1
            else:
                hi = mid - 1
        return found

    def visit(i: int, left: list[int], weighted: int, total: int) -> None:
        nodes[0] += 1
        if nodes[0] > limit:
            raise SearchLimit
        if i == m:
            key = (weighted, total)
            if best[0] is None or key > best[0]:
                best[0], best[1] = key, list(counts)
            return
        bound_w, bound_t = weighted, total
        for j in range(i, m):
            others = [s - c for s, c in zip(suffix[i], least[j], strict=True)]
            n = best_alone(j, [a - o for a, o in zip(left, others, strict=True)])
            if n is None:
                return
            bound_w += value[j] * n
            bound_t += n
        if best[0] is not None and (bound_w, bound_t) <= best[0]:
            return
        rest = suffix[i + 1]
        for n, cost in reversed(choices[i]):
            after = [a - c for a, c in zip(left, cost, strict=True)]
            if any(a < r for a, r in zip(after, rest, strict=True)):
                continue
            counts[i] = n
            visit(i + 1, after, weighted + value[i] * n, total + n)

    visit(0, list(room), 0, 0)
    assert best[1] is not None  # step 1 proved the admissible minimum fits
    return best[1], nodes[0]
