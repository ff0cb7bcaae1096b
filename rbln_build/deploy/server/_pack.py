"""Placement and counts together, as a constraint program solved by OR-Tools CP-SAT.

The server's problem (``_server``): every model goes on exactly one card (a device group of the
server's target) that it may use (all of them, or the one it is pinned to), at one of its options
(count, bytes per (node, chiplet) of a card), and on every card and (node, chiplet) what its models
occupy must fit the card's room (its capacity after its reservations and its margin).

The objective is the single-card planner's (``_terms.OBJECTIVE``), over the whole server, then a
tie-break of its own for the placement:

1. the largest smallest share ``count / full pool`` over the planned models: a binary search over
   the candidate shares, each step a feasibility question (each model at its first option at or
   above the share; fewer blocks never need more bytes, so feasibility is monotone);
2. then the largest weighted sum of shares; 3. then the most blocks; 4. then each model's count in
   listed order (larger first);
5. then each model's card in listed order (lower first): the plan is unique, and identical cards
   are filled from card 0.

One Boolean per (model, option, card), exactly one per model; each stage fixes the value the
previous one proved and starts from its solution. Exact when every stage proves optimality; a stage
that reaches the time limit keeps the best plan found and says what was not proven.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ...errors import ConfigError

__all__ = ["Item", "Packed", "pack"]

Vector = tuple[int, ...]


@dataclass(frozen=True)
class Item:
    """One model: its options (count, bytes per bucket of a card) ascending, the cards it may use,
    and (planned models only) its full pool and weight; a fixed model has one option and no weight."""

    options: tuple[tuple[int, Vector], ...]
    cards: tuple[int, ...]
    full: int
    weight: Fraction | None  # None: fixed (accounted for, not in the objective)


@dataclass(frozen=True)
class Packed:
    counts: tuple[int, ...]
    cards: tuple[int, ...]
    optimal: bool
    gap: Fraction  # weighted share the optimum may have above this plan's (0 when proven or unknown)
    note: str
    solves: int  # CP-SAT solves made (feasibility steps and stages)


def pack(items: Sequence[Item], rooms: Sequence[Vector], time_limit: float, workers: int = 1) -> Packed | None:
    """The best plan, or None when the models at their lower bounds do not fit the cards together
    (or the clock ran out before any plan was found: then a ConfigError says so)."""
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        raise ConfigError(
            "deployment.server: placing models on a server's cards needs the CP-SAT solver; install it with "
            "`pip install 'rbln-build[solver]'`."
        ) from None
    deadline = time.monotonic() + time_limit
    solves = 0

    def build(starts: Sequence[int]) -> tuple[Any, list[list[list[Any]]]]:
        """The model with each item's options from ``starts[i]`` on."""
        model = cp_model.CpModel()
        x = [
            [{k: model.new_bool_var(f"x{i}_{j}_{k}") for k in it.cards} for j in range(s, len(it.options))]
            for i, (it, s) in enumerate(zip(items, starts, strict=True))
        ]
        for row in x:
            model.add_exactly_one(v for opt in row for v in opt.values())
        for k, room in enumerate(rooms):
            for b, cap in enumerate(room):
                terms = [
                    (it.options[s + j][1][b], v)
                    for it, s, row in zip(items, starts, x, strict=True)
                    for j, opt in enumerate(row)
                    for kk, v in opt.items()
                    if kk == k and it.options[s + j][1][b]
                ]
                if sum(c for c, _ in terms) > cap:  # else every combination fits this bucket
                    model.add(sum(c * v for c, v in terms) <= cap)
        return model, [[list(opt.get(k) for k in range(len(rooms))) for opt in row] for row in x]

    def solve(model: Any, seconds: float) -> tuple[Any, int]:
        nonlocal solves
        solves += 1
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = workers
        solver.parameters.max_time_in_seconds = max(seconds, 0.001)
        return solver, solver.solve(model)

    planned = [i for i, it in enumerate(items) if it.weight is not None]

    def starts_at(share: Fraction) -> list[int] | None:
        out = []
        for it in items:
            if it.weight is None:
                out.append(0)
                continue
            j = next((j for j, (n, _) in enumerate(it.options) if Fraction(n, it.full) >= share), None)
            if j is None:
                return None
            out.append(j)
        return out

    def feasible(starts: list[int]) -> bool:
        """Whether every model fits at its first option from ``starts`` on (fewer blocks never need
        more bytes, so only that option matters)."""
        model, x = build(starts)
        for row in x:
            for opt in row[1:]:
                for v in opt:
                    if v is not None:
                        model.add(v == 0)
        solver, status = solve(model, deadline - time.monotonic())
        if status == cp_model.INFEASIBLE:
            return False
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return True
        raise ConfigError(
            f"deployment.server: the solver found no placement within its time limit of {time_limit:g} s "
            "(deployment.solver.time_limit); raise it, or pin some models to cards."
        )

    lowest = [0] * len(items)
    if not feasible(lowest):
        return None
    shares = sorted({Fraction(n, items[i].full) for i in planned for n, _ in items[i].options})
    lo, hi = 0, len(shares) - 1  # shares[lo] is feasible (the lower bounds are)
    best_starts = lowest
    if planned:
        first = starts_at(shares[0])
        assert first is not None
        best_starts = first
        while lo < hi:
            mid = (lo + hi + 1) // 2
            s = starts_at(shares[mid])
            if s is not None and feasible(s):
                lo, best_starts = mid, s
            else:
                hi = mid - 1
    return _stages(items, rooms, best_starts, build, solve, deadline, time_limit, cp_model, lambda: solves)


def _stages(
    items: Sequence[Item],
    rooms: Sequence[Vector],
    starts: list[int],
    build: Callable[[Sequence[int]], tuple[Any, list[list[list[Any]]]]],
    solve: Callable[[Any, float], tuple[Any, int]],
    deadline: float,
    time_limit: float,
    cp_model: Any,
    solves: Callable[[], int],
) -> Packed:
    """Steps 2-5 over the options from ``starts`` on (the max-min threshold)."""
    model, x = build(starts)
    coefs = [it.weight / it.full if it.weight is not None else Fraction(0) for it in items]
    scale = math.lcm(*(c.denominator for c in coefs)) if coefs else 1
    value = [int(c * scale) for c in coefs]
    if sum(v * it.options[-1][0] for v, it in zip(value, items, strict=True)) >= 2**62:
        raise ConfigError(
            "deployment: the weighted shares' common denominator is too large for the CP-SAT solver's 64-bit "
            "integers (weights and full pools with many different factors); use fewer distinct weights."
        )
    count = [
        sum(it.options[s + j][0] * v for j, opt in enumerate(row) for v in opt if v is not None)
        for it, s, row in zip(items, starts, x, strict=True)
    ]
    card = [
        sum(k * v for opt in row for k, v in enumerate(opt) if v is not None and k) for row in x
    ]
    planned = [i for i, it in enumerate(items) if it.weight is not None]
    stages: list[tuple[Any, bool, str]] = [
        (sum(value[i] * count[i] for i in planned), True, "the weighted share"),
        (sum(count[i] for i in planned), True, "the total blocks"),
        *((count[i], True, "the tie-break between equal plans") for i in planned),
        *((card[i], False, "the tie-break between equal placements") for i in range(len(items))),
    ]
    solver = None
    for n, (objective, up, what) in enumerate(stages):
        if up:
            model.maximize(objective)
        else:
            model.minimize(objective)
        solver, status = solve(model, deadline - time.monotonic())
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            raise ConfigError(
                f"deployment.server: the solver found no plan within its time limit of {time_limit:g} s "
                "(deployment.solver.time_limit); raise it, or pin some models to cards."
            )
        model.clear_hints()
        for row in x:
            for opt in row:
                for v in opt:
                    if v is not None:
                        model.add_hint(v, solver.boolean_value(v))
        if status != cp_model.OPTIMAL:
            gap = Fraction(0)
            if n == 0:
                bound = Fraction(math.floor(solver.best_objective_bound), scale)
                gap = max(bound - Fraction(round(solver.objective_value), scale), Fraction(0))
                note = f"not proven optimal in {time_limit:g} s: the weighted share may be up to {float(gap):.4g} below the optimum"
            else:
                note = f"the weighted share is optimal; {what} not proven in {time_limit:g} s"
            return _read(items, starts, x, solver, False, gap, note, solves())
        model.add(objective == round(solver.objective_value))
    return _read(items, starts, x, solver, True, Fraction(0), "proven optimal", solves())


def _read(items, starts, x, solver, optimal, gap, note, solves) -> Packed:  # type: ignore[no-untyped-def]
    counts, cards = [], []
    for it, s, row in zip(items, starts, x, strict=True):
        j, k = next((j, k) for j, opt in enumerate(row) for k, v in enumerate(opt) if v is not None and solver.boolean_value(v))
        counts.append(it.options[s + j][0])
        cards.append(k)
    return Packed(tuple(counts), tuple(cards), optimal, gap, note, solves)
