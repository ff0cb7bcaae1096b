"""The co-location planner: block counts (and budgets) for models that share one device target.

**What fits** (``ACCOUNTING``): on every (node, chiplet), the bytes every model occupies at its
count (its report's non-KV bytes plus its KV pool scaled to the count, the estimator's arithmetic)
plus the reservations must fit the chiplet's available DRAM. A ``memory_budget`` is only a guide:
optimum-rbln 0.12.0 uses it once, at compile time, to pick ``kvcache_num_blocks``
(``_resolve_memory_budget`` / ``estimate_num_kvcache_blocks``), resizes the KV buffers to that count
and does not even save it (``subclass_non_save_attributes``); the runtime allocates what the compiled
model holds, and vllm-rbln takes its block count from the compiled model. The evidence, file by
file: docs/colocation.md ("What a memory_budget is").

Two ways to pin a model's count, both planned every time under that one accounting:

* **budget** (``mode: budget``): each planned model gets the smallest ``memory_budget`` that the
  estimator resolves to its planned count. A budget resolves to the largest count whose tightest
  chiplet fits ``budget // num_chiplets``, so only counts where that tightest chiplet grows at the
  next count (or the full pool) can be produced by a budget: those are the budget plan's candidates.
* **blocks** (``mode: blocks``): each planned model gets an explicit ``kvcache_num_blocks``; every
  count is a candidate.

A model with a fixed ``memory_budget`` is not planned: its count is what the estimator resolves
from that budget, and it is charged what it occupies at that count. Reservations are charged on their
chiplet, or spread evenly.

**The objective** (``OBJECTIVE``), over the planned models, in this order:

1. the largest smallest share ``kvcache_num_blocks / full pool`` (max-min: no model is starved);
2. then the largest weighted sum of shares (``weight``: who gets the room left over);
3. then the most blocks in total;
4. then the plan that gives more blocks to the models listed first (so the answer is unique).

**Exact.** Every candidate count between a model's lower bound (its floor, or ``min_blocks``) and its
full pool is considered; counts whose bytes equal the next count's are dominated by it (2 MiB
alignment makes plateaus) and skipped. Step 1 is a binary search over the candidate shares (fitting is
monotone: fewer blocks never need more bytes); step 2-4 is a depth-first branch and bound over the
models in their listed order, counts high to low, with a bound that is never below the truth, so
the first best plan found is the optimum and its tie-break. Integers and fractions only: no floats
decide anything. A search that grows past ``NODE_LIMIT`` nodes stops with an error rather than
answer approximately.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from ..errors import BuildError, ConfigError
from ..estimator import Request, estimate, fraction_for_bytes
from . import _cpsat
from ._conflict import Conflict, find_conflicts
from ._inputs import NO_MARGIN, Demand, Margins, Reservation, Target, Tenant
from ._modeplan import PROOF_SEARCH, Assignment, ModePlan, Objective, Proof
from ._search import SearchLimit, Vector, branch_and_bound, max_min_start
from ._terms import (
    ACCOUNTING,
    AUTO,
    BLOCKS,
    BUDGET,
    CP_SAT,
    DEFAULT_SOLVER,
    MODES,
    NODE_LIMIT,
    OBJECTIVE,
    SEARCH,
    SOLVERS,
    Solver,
    budget_value,
)

__all__ = [
    "BUDGET",
    "BLOCKS",
    "MODES",
    "OBJECTIVE",
    "ACCOUNTING",
    "NODE_LIMIT",
    "AUTO",
    "SEARCH",
    "CP_SAT",
    "SOLVERS",
    "Solver",
    "DEFAULT_SOLVER",
    "Problem",
    "budget_value",
]


class Problem:
    """One deployment's planning problem: the demands are computed once and shared by both modes."""

    def __init__(
        self,
        target: Target,
        tenants: Sequence[Tenant],
        reservations: Sequence[Reservation] = (),
        margins: Margins = NO_MARGIN,
        solver: Solver = DEFAULT_SOLVER,
    ) -> None:
        names = [t.name for t in tenants]
        if len(set(names)) != len(names) or not names:
            raise ConfigError(f"deployment: model names must be unique and at least one is needed, got {names}.")
        C = target.num_chiplets
        per_chiplet = [0] * C
        for r in reservations:
            if r.chiplet is not None and not 0 <= r.chiplet < C:
                raise ConfigError(
                    f"deployment reservation {r.name}: chiplet {r.chiplet} does not exist on {target.npu.name} "
                    f"({C} chiplet(s) per device: 0..{C - 1}); or leave it null to spread it evenly."
                )
            if r.nbytes <= 0:
                raise ConfigError(f"deployment reservation {r.name}: bytes must be positive, got {r.nbytes}.")
            per_chiplet = [a + b for a, b in zip(per_chiplet, r.per_chiplet(C), strict=True)]
        self.target = target
        self.tenants = tuple(tenants)
        self.reservations = tuple(reservations)
        self.demands = tuple(Demand(t, target) for t in tenants)
        self.reserved: Vector = tuple(per_chiplet[c] for _, c in target.buckets())
        self.margins = margins
        if solver.method not in SOLVERS:
            raise ConfigError(f"deployment.solver.method: expected one of {', '.join(SOLVERS)}, got {solver.method!r}.")
        self.solver = solver
        self.margin: Vector = margins.per_bucket(target)
        self._fixed: dict[str, tuple[int, int] | str] = {}
        self._options: dict[tuple[str, str], list[tuple[int, Vector]]] = {}

    # -- the pieces ---------------------------------------------------------------------------------

    def fixed_resolution(self, d: Demand) -> tuple[int, int] | str:
        """(count, budget bytes) the estimator resolves from a fixed budget, or its error message."""
        t = d.tenant
        if t.name not in self._fixed:
            request = Request.for_attention(
                self.target.npu.name,
                self.target.num_devices,
                t.attention,
                memory_budget=t.memory_budget,
                current_blocks=t.report.current_blocks,
            )
            res = estimate(request, t.report)
            if res.ok and res.kvcache_num_blocks is not None and res.breakdown is not None:
                assert res.breakdown.budget_bytes is not None
                self._fixed[t.name] = (res.kvcache_num_blocks, res.breakdown.budget_bytes)
            else:
                error = (res.error or "").rstrip(".")  # the reason is printed as a sentence of its own
                self._fixed[t.name] = f"its fixed memory_budget {t.memory_budget!r}: {error}"
        return self._fixed[t.name]

    def capacity(self) -> Vector:
        """What each (node, chiplet) offers the models once the reservations and the margin are held."""
        available = self.target.available_per_chiplet
        return tuple(available - r - m for r, m in zip(self.reserved, self.margin, strict=True))

    def options(self, d: Demand, mode: str) -> list[tuple[int, Vector]]:
        """(count, occupancy) from the lower bound to the full pool; ascending, costs non-decreasing.
        Skipped: counts whose occupancy equals the next count's (the next one is as cheap and gives
        more), and in budget mode counts no budget resolves to (the tightest chiplet does not grow at
        the next count, so a budget that holds this count holds the next one too)."""
        t = d.tenant
        key = (t.name, mode)
        if key in self._options:
            return self._options[key]
        out = []
        for n in range(t.lower_bound, t.full + 1):
            cost = d.need(n)
            if n < t.full:
                if mode == BUDGET and d.slice(n + 1) == d.slice(n):
                    continue
                if d.need(n + 1) == cost:
                    continue
            out.append((n, cost))
        self._options[key] = out
        return out

    def _fixed_costs(self, mode: str, members: set[str] | None) -> tuple[Vector, list[str]]:
        """The fixed tenants' total cost (in the mode's dimensions) and those whose budget fails."""
        total = [0] * len(self.reserved)
        failing = []
        for d in self.demands:
            if not d.tenant.fixed or (members is not None and d.tenant.name not in members):
                continue
            fixed = self.fixed_resolution(d)
            if isinstance(fixed, str):
                failing.append(d.tenant.name)
                continue
            count, _ = fixed
            total = [a + b for a, b in zip(total, d.need(count), strict=True)]
        return tuple(total), failing

    def at_floors(self, mode: str, members: set[str] | None = None, with_reserved: bool = True) -> Vector | None:
        """Per bucket: the given models (all by default) at their lower bounds (a fixed model at its
        resolved count), plus the reservations and the margin; None when a given fixed model's budget fails."""
        fixed_cost, failing = self._fixed_costs(mode, members)
        if failing:
            return None
        held = [r + m for r, m in zip(self.reserved, self.margin, strict=True)]
        total = [f + (h if with_reserved else 0) for f, h in zip(fixed_cost, held, strict=True)]
        for d in self.demands:
            if d.tenant.fixed or (members is not None and d.tenant.name not in members):
                continue
            first = self.options(d, mode)[0][1]
            total = [t + c for t, c in zip(total, first, strict=True)]
        return tuple(total)

    def fits_at_floors(self, mode: str, members: set[str] | None = None) -> bool:
        """Whether the given models (all by default), each at its lower bound, fit with the reservations
        and the margin."""
        total = self.at_floors(mode, members)
        return total is not None and all(t <= self.target.available_per_chiplet for t in total)

    def conflicts(self, mode: str) -> tuple[Conflict, ...]:
        """Every model that cannot fit, each with its reason (``_conflict``)."""
        return find_conflicts(self, mode)

    # -- solving ------------------------------------------------------------------------------------

    def solve(self, mode: str, limit: int = NODE_LIMIT) -> ModePlan:
        if mode not in MODES:
            raise ConfigError(f"deployment.mode: expected one of {', '.join(MODES)}, got {mode!r}.")
        fixed_cost, failing = self._fixed_costs(mode, None)
        room = tuple(c - f for c, f in zip(self.capacity(), fixed_cost, strict=True))
        planned = [d for d in self.demands if not d.tenant.fixed]
        options = [self.options(d, mode) for d in planned]
        counts: list[int] | None = None
        nodes = 0
        proof = PROOF_SEARCH
        if not failing:
            start = max_min_start(planned, options, room)
            if start is not None:
                choices = [opts[s:] for opts, s in zip(options, start, strict=True)]
                counts, nodes, proof = self._steps_2_to_4(planned, choices, room, limit)
        if counts is None:
            conflicts = self.conflicts(mode)
            if conflicts:
                reason = "; ".join(c.reason for c in conflicts)
            else:  # no model conflicts, so the reservations alone do
                reason = "the reservations alone exceed the available DRAM of a chiplet" + (
                    " (with the margin)" if self.margins else ""
                )
            names = tuple(c.name for c in conflicts)
            return ModePlan(
                mode, self.target, False, (), self.reserved, None, names, reason, nodes, conflicts, self.margin
            )
        return self._assemble(mode, dict(zip((d.tenant.name for d in planned), counts, strict=True)), nodes, proof)

    def _steps_2_to_4(
        self, planned: list[Demand], choices: list[list[tuple[int, Vector]]], room: Vector, limit: int
    ) -> tuple[list[int], int, Proof]:
        """The counts, the search nodes visited, and how they were proven (``Solver``)."""
        method = self.solver.method
        if method in (SEARCH, AUTO):
            # auto: a short search first (most deployments need a few dozen nodes), and OR-Tools only
            # past it, so that a deployment the search finishes never imports it
            cap = limit if method == SEARCH else min(limit, self.solver.auto_nodes)
            try:
                counts, nodes = branch_and_bound(planned, choices, room, cap)
                return counts, nodes, PROOF_SEARCH
            except SearchLimit:
                if method == AUTO and not _cpsat.available():
                    try:  # nothing to switch to: the search runs on to its own limit
                        counts, nodes = branch_and_bound(planned, choices, room, limit)
                        return counts, nodes, PROOF_SEARCH
                    except SearchLimit:
                        pass
                if method == SEARCH or not _cpsat.available():
                    hint = "" if _cpsat.available() else " (after `pip install 'rbln-build[solver]'`)"
                    raise ConfigError(
                        f"deployment on {self.target.name}: the exact search passed {limit:,} nodes without "
                        f"finishing; set deployment.solver.method=cp-sat{hint}, or fix some models' counts with "
                        "min_blocks or memory_budget to shrink it."
                    ) from None
        s = self.solver
        solved = _cpsat.cp_sat(planned, choices, room, s.time_limit, s.workers)
        return solved.counts, 0, Proof(CP_SAT, solved.optimal, solved.gap, solved.note)

    def _assemble(self, mode: str, counts: dict[str, int], nodes: int, proof: Proof) -> ModePlan:
        target, C = self.target, self.target.num_chiplets
        out = []
        for d in self.demands:
            t = d.tenant
            budget: int | None
            if t.fixed:
                resolved = self.fixed_resolution(d)
                assert not isinstance(resolved, str)
                count, budget = resolved
                value = t.memory_budget
            else:
                count = counts[t.name]
                budget = max(d.slice(count), 1) * C if mode == BUDGET else None
                value = budget_value(budget) if budget is not None else None
                if budget is not None:
                    _check_resolves(self, d, value, count)
            out.append(
                Assignment(
                    name=t.name,
                    fixed=t.fixed,
                    kvcache_num_blocks=count,
                    num_full_blocks=t.full,
                    num_min_blocks=t.floor,
                    lower_bound=t.lower_bound,
                    weight=t.weight,
                    memory_budget=value,
                    budget_bytes=budget,
                    budget_fraction=None if budget is None else fraction_for_bytes(budget, target.npu.available_bytes),
                    usage=d.need(count),
                )
            )
        planned = [a for a in out if not a.fixed]
        objective = Objective(
            min_share=min((a.share for a in planned), default=Fraction(1)),
            weighted_share=sum((a.weight * a.share for a in planned), Fraction(0)),
            total_blocks=sum(a.kvcache_num_blocks for a in planned),
        )
        plan = ModePlan(
            mode, target, True, tuple(out), self.reserved, objective, nodes=nodes, margin=self.margin, proof=proof
        )
        if min(plan.headroom()) < 0:  # the search only returns plans that fit; this is a bug if it fires
            raise BuildError(f"planner: the {mode} plan does not fit its own capacity ({plan.headroom()}).")
        return plan


def _check_resolves(problem: Problem, d: Demand, budget: object, count: int) -> None:
    """A planned budget must resolve to exactly its count through the estimator itself."""
    t = d.tenant
    request = Request.for_attention(
        problem.target.npu.name,
        problem.target.num_devices,
        t.attention,
        memory_budget=budget,
        current_blocks=t.report.current_blocks,
    )
    res = estimate(request, t.report)
    if res.kvcache_num_blocks != count:
        raise BuildError(
            f"planner: {t.name}'s planned budget {budget!r} resolves to {res.kvcache_num_blocks} blocks "
            f"({res.error or 'ok'}), not the planned {count}; this is a bug in rbln_build.deploy."
        )
