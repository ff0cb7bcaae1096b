"""A deployment's plan: both modes solved, and, when the configured mode has no plan, answers.

An infeasible plan names every model that cannot fit, each with its reason (``ModePlan.conflicts``,
``_conflict``), says on which other device targets a model that cannot fit even alone would fit
alone (``DeploymentPlan.elsewhere``), and lists changes that would fit, each the smallest of its
kind and each verified by planning again with the change applied (``suggest``); when no single change
fits, pairs of changes (``suggest.combinations``, within a bound on the plans it makes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ._inputs import NO_MARGIN, Margins, Reservation, Target, Tenant
from ._modeplan import ModePlan
from ._planner import BLOCKS, BUDGET, DEFAULT_SOLVER, Problem, Solver
from .suggest import MEASURE, PLAN_LIMIT, Reshape, Retarget, Suggestion, combinations, fits_alone_on, suggestions

__all__ = ["Suggestion", "DeploymentPlan", "Reshape", "Retarget", "plan_deployment", "MEASURE", "PLAN_LIMIT"]


@dataclass(frozen=True)
class DeploymentPlan:
    target: Target
    tenants: tuple[Tenant, ...]
    reservations: tuple[Reservation, ...]
    mode: str  # the configured mode: what a build uses
    budget: ModePlan
    blocks: ModePlan
    suggestions: tuple[Suggestion, ...] = ()
    elsewhere: tuple[tuple[str, tuple[str, ...]], ...] = ()  # model that cannot fit even alone -> targets where it can
    margins: Margins = Margins()
    combined: tuple[int, int] | None = None  # searched pairs of changes: (plans made, the limit)

    @property
    def chosen(self) -> ModePlan:
        return self.budget if self.mode == BUDGET else self.blocks

    @property
    def feasible(self) -> bool:
        return self.chosen.feasible

    def tenant(self, name: str) -> Tenant:
        return next(t for t in self.tenants if t.name == name)


def plan_deployment(
    target: Target,
    tenants: Sequence[Tenant],
    reservations: Sequence[Reservation] = (),
    mode: str = BUDGET,
    reshape: Reshape | None = None,
    retarget: Retarget | None = None,
    targets: Sequence[Target] = (),
    margins: Margins = NO_MARGIN,
    solver: Solver = DEFAULT_SOLVER,
    combination_limit: int = PLAN_LIMIT,
) -> DeploymentPlan:
    """Solve both modes; when ``mode`` has no plan, add the verified suggestions. ``targets``: the
    other device targets a deployment could move to (``retarget`` gives a model's report there).
    ``margins``: bytes held back on every chiplet, in every fit check (the suggestions' too);
    ``solver``: which exact method solves it (``Solver``); ``combination_limit``: the plans the search
    for pairs of changes may make (it runs only when no single change fits)."""
    problem = Problem(target, tenants, reservations, margins, solver)
    budget, blocks = problem.solve(BUDGET), problem.solve(BLOCKS)
    plan = DeploymentPlan(target, tuple(tenants), tuple(reservations), mode, budget, blocks, margins=margins)
    if plan.feasible:
        return plan
    others = [t for t in targets if t.name != target.name]
    found = suggestions(problem, mode, plan.chosen, blocks, reshape, retarget, others)
    combined = None
    if not found:
        found, tally = combinations(problem, mode, plan.chosen.conflict, reshape, retarget, others, combination_limit)
        combined = (tally.plans, tally.limit)
    elsewhere = tuple(
        (c.name, fits_alone_on(c.name, tenants, reservations, mode, retarget, others, margins, solver))
        for c in plan.chosen.conflicts
        if c.alone
    )
    return replace(plan, suggestions=tuple(found), elsewhere=elsewhere, combined=combined)
