"""Steps 2-4 of the planner's objective as a constraint program, solved by OR-Tools CP-SAT.

The same problem as ``_search.branch_and_bound``, over the same options (each model's counts at or
above the max-min threshold of step 1, with their per-bucket costs) and the same room:

* one Boolean per (model, option), exactly one per model;
* per (node, chiplet): the chosen options' bytes fit the room (buckets that every combination fits
  are left out; each model's cheapest option is subtracted first, which keeps the coefficients small);
* lexicographically: the largest weighted sum of shares (integers: ``weight / full`` over a common
  denominator, as the search does), then the most blocks, then each model's count in listed order
  (the tie-break), each stage fixing the value the previous one proved optimal and starting from its
  solution.

Exact when every stage proves optimality: its counts are then the search's. A stage that reaches the
time limit keeps the best plan found, and says how far from the optimum it may be (the weighted share
below the solver's proven bound; or, past the first stage, that only the tie-breaks are unproven).

``ortools`` is an optional dependency (the ``solver`` extra): imported here only when a plan needs it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..errors import ConfigError
from ._inputs import Demand

__all__ = ["Solved", "available", "cp_sat"]

Vector = tuple[int, ...]
_INT_LIMIT = 2**62  # CP-SAT's integers are int64; keep every sum well inside


@dataclass(frozen=True)
class Solved:
    counts: list[int]
    optimal: bool  # every stage proved optimal: these are the exact optimum's counts
    gap: Fraction  # how much weighted share the optimum may have above this plan's (0 when proven)
    note: str  # what was proven, in words


def available() -> bool:
    """Whether OR-Tools is installed (``pip install 'rbln-build[solver]'``), without importing it."""
    import importlib.util

    return importlib.util.find_spec("ortools") is not None


def cp_sat(
    planned: Sequence[Demand],
    choices: Sequence[list[tuple[int, Vector]]],
    room: Vector,
    time_limit: float,
    workers: int = 1,
) -> Solved:
    """Maximize (weighted share, total blocks, counts in listed order) over ``choices`` within ``room``.
    ``time_limit``: seconds for all the stages together."""
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        raise ConfigError(
            "deployment: the CP-SAT solver needs OR-Tools; install it with `pip install 'rbln-build[solver]'` "
            "(or set deployment.solver.method=search)."
        ) from None
    dims = len(room)
    coefs = [d.tenant.weight / d.tenant.full for d in planned]
    scale = math.lcm(*(c.denominator for c in coefs)) if coefs else 1
    value = [int(c * scale) for c in coefs]
    if sum(v * opts[-1][0] for v, opts in zip(value, choices, strict=True)) >= _INT_LIMIT:
        raise ConfigError(
            "deployment: the weighted shares' common denominator is too large for the CP-SAT solver's 64-bit "
            "integers (weights and full pools with many different factors); set deployment.solver.method=search."
        )
    model = cp_model.CpModel()
    x = [[model.new_bool_var(f"x{i}_{j}") for j in range(len(opts))] for i, opts in enumerate(choices)]
    for row in x:
        model.add_exactly_one(row)
    for k in range(dims):
        base = sum(opts[0][1][k] for opts in choices)
        if base + sum(opts[-1][1][k] - opts[0][1][k] for opts in choices) <= room[k]:
            continue  # every combination fits this bucket
        model.add(
            sum((opts[j][1][k] - opts[0][1][k]) * x[i][j] for i, opts in enumerate(choices) for j in range(len(opts)))
            <= room[k] - base
        )
    count = [sum(n * x[i][j] for j, (n, _) in enumerate(opts)) for i, opts in enumerate(choices)]
    weighted = sum(v * c for v, c in zip(value, count, strict=True))
    total = sum(count)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    deadline = time.monotonic() + time_limit

    def run(objective: Any) -> tuple[bool, bool]:
        """(found a solution, proved it optimal); the next stage starts from it."""
        solver.parameters.max_time_in_seconds = max(deadline - time.monotonic(), 0.001)
        model.maximize(objective)
        status = solver.solve(model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return False, False
        model.clear_hints()  # type: ignore[no-untyped-call]
        for row in x:
            for var in row:
                model.add_hint(var, solver.boolean_value(var))
        return True, status == cp_model.OPTIMAL

    def counts() -> list[int]:
        return [
            opts[next(j for j, v in enumerate(row) if solver.boolean_value(v))][0]
            for opts, row in zip(choices, x, strict=True)
        ]

    for row in x:  # start from the admissible minimum, which step 1 proved fits
        for j, var in enumerate(row):
            model.add_hint(var, j == 0)
    found, proven = run(weighted)
    trivial = sum(v * opts[-1][0] for v, opts in zip(value, choices, strict=True))  # every model at its full pool
    if not found:  # only the clock can do this: keep the admissible minimum
        # no solution in this stage, so no bound to trust (CP-SAT may report one below the plan kept, as
        # the server's packer found): claim only the trivial one
        best = [opts[0][0] for opts in choices]
        gap = Fraction(trivial - sum(v * n for v, n in zip(value, best, strict=True)), scale)
        return Solved(best, False, gap, _unproven(time_limit, gap))
    best = counts()
    if not proven:
        achieved = sum(v * n for v, n in zip(value, best, strict=True))
        bound = solver.best_objective_bound
        if not math.isfinite(bound) or bound < achieved:  # a bound below a plan found is no bound
            bound = trivial
        gap = Fraction(math.floor(bound) - achieved, scale)
        return Solved(best, False, gap, _unproven(time_limit, gap))
    model.add(weighted == round(solver.objective_value))
    stages = [total, *count]
    for i, objective in enumerate(stages):
        found, proven = run(objective)
        if found:
            best = counts()
        if not proven:
            what = "the total blocks" if i == 0 else "the tie-break between equal plans"
            return Solved(
                best, False, Fraction(0), f"the weighted share is optimal; {what} not proven in {time_limit:g} s"
            )
        model.add(objective == round(solver.objective_value))
    return Solved(best, True, Fraction(0), "proven optimal")


def _unproven(time_limit: float, gap: Fraction) -> str:
    return f"not proven optimal in {time_limit:g} s: the weighted share may be up to {float(gap):.4g} below the optimum"
