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
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ...errors import ConfigError

__all__ = ["Item", "Packed", "fits", "pack"]

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


class _Clock(Exception):
    """The time limit passed before a question was answered."""


def pack(items: Sequence[Item], rooms: Sequence[Vector], time_limit: float, workers: int = 1) -> Packed | None:
    """The best plan, or None when the models at their lower bounds do not fit the cards together
    (a ConfigError when the clock ran out before any placement was found)."""
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        raise ConfigError(
            "deployment.server: placing models on a server's cards needs the CP-SAT solver; install it with "
            "`pip install 'rbln-build[solver]'`."
        ) from None
    return _Packer(cp_model, items, rooms, time_limit, workers).run()


def fits(items: Sequence[Item], rooms: Sequence[Vector], time_limit: float, workers: int = 1) -> bool | None:
    """Whether some placement holds every model at its lower bound (None: not answered in time)."""
    from ortools.sat.python import cp_model  # pack() ran first and said how to install it

    try:
        return _Packer(cp_model, items, rooms, time_limit, workers).feasible([0] * len(items)) is not None
    except _Clock:
        return None


class _Packer:
    def __init__(
        self, cp_model: Any, items: Sequence[Item], rooms: Sequence[Vector], time_limit: float, workers: int
    ) -> None:
        self.cp = cp_model
        self.items, self.rooms = items, rooms
        self.time_limit, self.workers = time_limit, workers
        self.deadline = time.monotonic() + time_limit
        self.solves = 0

    def build(self, starts: Sequence[int], only_first: bool = False) -> tuple[Any, list[list[list[Any]]]]:
        """The model over each item's options from ``starts[i]`` on (``only_first``: that one only);
        ``x[i][j][k]``: item i at its option ``starts[i] + j`` on card k (None: a card it may not use)."""
        items, rooms = self.items, self.rooms
        model = self.cp.CpModel()
        x = [
            [
                {k: model.new_bool_var(f"x{i}_{j}_{k}") for k in it.cards}
                for j in range(s, s + 1 if only_first else len(it.options))
            ]
            for i, (it, s) in enumerate(zip(items, starts, strict=True))
        ]
        for row in x:
            model.add_exactly_one(v for opt in row for v in opt.values())
        _break_symmetry(model, items, rooms, x)
        _order_twins(model, items, starts, x)
        for k, room in enumerate(rooms):
            for b, cap in enumerate(room):
                terms = [
                    (it.options[s + j][1][b], opt[k])
                    for it, s, row in zip(items, starts, x, strict=True)
                    for j, opt in enumerate(row)
                    if k in opt and it.options[s + j][1][b]
                ]
                if sum(c for c, _ in terms) > cap:  # else every combination fits this bucket
                    model.add(sum(c * v for c, v in terms) <= cap)
        return model, [[[opt.get(k) for k in range(len(rooms))] for opt in row] for row in x]

    def solve(self, model: Any) -> tuple[Any, int]:
        self.solves += 1
        solver = self.cp.CpSolver()
        solver.parameters.num_workers = self.workers
        solver.parameters.max_time_in_seconds = max(self.deadline - time.monotonic(), 0.001)
        return solver, solver.solve(model)

    def feasible(self, starts: list[int]) -> list[int] | None:
        """The cards of a placement with every model at its first option from ``starts`` on (fewer
        blocks never need more bytes, so only that option matters), or None when there is none."""
        model, x = self.build(starts, only_first=True)
        solver, status = self.solve(model)
        if status == self.cp.INFEASIBLE:
            return None
        if status not in (self.cp.OPTIMAL, self.cp.FEASIBLE):
            raise _Clock
        return [next(k for k, v in enumerate(row[0]) if v is not None and solver.boolean_value(v)) for row in x]

    def starts_at(self, share: Fraction) -> list[int] | None:
        out = []
        for it in self.items:
            j = 0
            if it.weight is not None:
                j = next((j for j, (n, _) in enumerate(it.options) if Fraction(n, it.full) >= share), -1)
                if j < 0:
                    return None
            out.append(j)
        return out

    def run(self) -> Packed | None:
        items = self.items
        lowest = [0] * len(items)
        try:
            cards = self.feasible(lowest)
        except _Clock:
            raise ConfigError(
                f"deployment.server: the solver found no placement within its time limit of {self.time_limit:g} s "
                "(deployment.solver.time_limit); raise it, or pin some models to cards."
            ) from None
        if cards is None:
            return None
        # step 1: the largest smallest share, by binary search over the candidate shares
        shares = sorted({Fraction(n, it.full) for it in items if it.weight is not None for n, _ in it.options})
        starts, lo, hi = lowest, 0, len(shares) - 1
        if shares:
            starts = self.starts_at(shares[0]) or lowest
        try:
            while lo < hi:
                mid = (lo + hi + 1) // 2
                s = self.starts_at(shares[mid])
                found = None if s is None else self.feasible(s)
                if s is not None and found is not None:
                    lo, starts, cards = mid, s, found
                else:
                    hi = mid - 1
        except _Clock:
            note = (
                f"not proven optimal in {self.time_limit:g} s: the smallest share is at least "
                f"{float(shares[lo]):.4g}, a larger one not ruled out"
            )
            counts = [it.options[s][0] for it, s in zip(items, starts, strict=True)]
            return Packed(tuple(counts), tuple(cards), False, Fraction(0), note, self.solves)
        return self.stages(starts, cards)

    def stages(self, starts: list[int], cards: list[int]) -> Packed:
        """Steps 2-5 over the options from ``starts`` on (the max-min threshold), starting from the
        placement step 1 found (``cards``, each model at its first option there)."""
        items, cp = self.items, self.cp
        model, x = self.build(starts)
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
        card = [sum(k * v for opt in row for k, v in enumerate(opt) if v is not None and k) for row in x]
        planned = [i for i, it in enumerate(items) if it.weight is not None]
        stages: list[tuple[Any, bool, str]] = [
            (sum(value[i] * count[i] for i in planned), True, "the weighted share"),
            (sum(count[i] for i in planned), True, "the total blocks"),
            *((count[i], True, "the tie-break between equal plans") for i in planned),
            *((card[i], False, "the tie-break between equal placements") for i in range(len(items))),
        ]
        best = ([it.options[s][0] for it, s in zip(items, starts, strict=True)], cards)
        hint = [(0, k) for k in cards]
        for n, (objective, up, what) in enumerate(stages):
            model.clear_hints()
            for row, (hj, hk) in zip(x, hint, strict=True):
                for j, opt in enumerate(row):
                    for k, v in enumerate(opt):
                        if v is not None:
                            model.add_hint(v, (j, k) == (hj, hk))
            model.maximize(objective) if up else model.minimize(objective)
            solver, status = self.solve(model)
            if status in (cp.OPTIMAL, cp.FEASIBLE):
                hint = [
                    next(
                        (j, k)
                        for j, opt in enumerate(row)
                        for k, v in enumerate(opt)
                        if v is not None and solver.boolean_value(v)
                    )
                    for row in x
                ]
                best = (
                    [it.options[s + j][0] for it, s, (j, _) in zip(items, starts, hint, strict=True)],
                    [k for _, k in hint],
                )
            if status != cp.OPTIMAL:
                gap = Fraction(0)
                if n == 0:
                    found = sum(v * c for v, c in zip(value, best[0], strict=True))
                    bound = solver.best_objective_bound
                    if status != cp.FEASIBLE or not math.isfinite(bound) or bound < found:
                        # no solution in this stage, so no bound to trust: every model at its full pool
                        bound = sum(v * it.options[-1][0] for v, it in zip(value, items, strict=True))
                    gap = Fraction(math.floor(bound) - found, scale)
                    note = (
                        f"not proven optimal in {self.time_limit:g} s: the weighted share may be up to "
                        f"{float(gap):.4g} below the optimum"
                    )
                else:
                    note = f"the weighted share is optimal; {what} not proven in {self.time_limit:g} s"
                return Packed(tuple(best[0]), tuple(best[1]), False, gap, note, self.solves)
            model.add(objective == round(solver.objective_value))
        return Packed(tuple(best[0]), tuple(best[1]), True, Fraction(0), "proven optimal", self.solves)


def _break_symmetry(model: Any, items: Sequence[Item], rooms: Sequence[Vector], x: list[list[dict[int, Any]]]) -> None:
    """Cards no model is pinned to, with the same room, are interchangeable: of two such cards a < b
    (consecutive in their class), a model goes on b only if an earlier model went on a. The plan of
    step 5 (each model's card in listed order, lower first) always has this form (swapping a and b
    would give the first model on b a lower card and change nothing before it), so the constraint
    keeps the answer and spares the solver every relabelling of the cards."""
    pinned = {it.cards[0] for it in items if len(it.cards) == 1}
    classes: dict[Vector, list[int]] = {}
    for k, room in enumerate(rooms):
        if k not in pinned:
            classes.setdefault(tuple(room), []).append(k)
    on = [{k: model.new_bool_var(f"y{i}_{k}") for k in it.cards} for i, it in enumerate(items)]
    for i, row in enumerate(x):
        for k, y in on[i].items():
            model.add(sum(opt[k] for opt in row) == y)
    for members in classes.values():
        for a, b in zip(members, members[1:], strict=False):
            for i in range(len(items)):
                if b not in on[i]:
                    continue
                earlier = [on[e][a] for e in range(i) if a in on[e]]
                if earlier:
                    model.add_bool_or(earlier).only_enforce_if(on[i][b])
                else:
                    model.add(on[i][b] == 0)


def _order_twins(model: Any, items: Sequence[Item], starts: Sequence[int], x: list[list[dict[int, Any]]]) -> None:
    """Two identical models (the same options, cards, full pool and weight: replicas of one model)
    i < i': in the plan of steps 4-5 i has at least i's count, and at an equal count a card no
    higher (swapping the two would otherwise give a better tie-break and change nothing else)."""

    def count(i: int) -> Any:
        return sum(items[i].options[starts[i] + j][0] * v for j, opt in enumerate(x[i]) for v in opt.values())

    def card(i: int) -> Any:
        return sum(k * v for opt in x[i] for k, v in opt.items() if k)

    last: dict[object, int] = {}
    for i, it in enumerate(items):
        key = (it.options[starts[i] :], it.cards, it.full, it.weight)
        if key in last:
            a = last[key]
            model.add(count(a) >= count(i))
            same = model.new_bool_var(f"same{a}_{i}")
            model.add(count(a) == count(i)).only_enforce_if(same)
            model.add(count(a) > count(i)).only_enforce_if(same.Not())
            model.add(card(a) <= card(i)).only_enforce_if(same)
        last[key] = i
