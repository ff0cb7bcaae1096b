"""A deployment's plan: both modes solved, and, when the configured mode has no plan, answers.

An infeasible plan names a minimal set of models that cannot reach their floors together
(``ModePlan.conflict``) and lists changes that would fit, each the smallest of its kind and each
verified by planning again with the change applied (never guessed):

* ``mode``: the blocks plan fits where budgets split evenly do not;
* ``batch_size``: the largest smaller batch for one model of the conflict;
* ``max_seq_len``: the longest shorter length for one model, a multiple of its partition;
* ``min_blocks``: the largest smaller minimum for a model that sets one;
* ``memory_budget``: the largest budget that fits for a model with a fixed budget;
* ``drop_reservation``: a reservation without which the plan fits.

``given_up`` ranks them (``MEASURE``); the first is the smallest change. A batch or length change
needs the model's report at the new geometry: ``reshape`` provides it (the build layer asks the
compile cache or the memory model), so this module stays pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from ..errors import UserError
from ._inputs import Reservation, Target, Tenant
from ._planner import BLOCKS, BUDGET, ModePlan, Problem

__all__ = ["Suggestion", "DeploymentPlan", "Reshape", "plan_deployment", "MEASURE"]

Reshape = Callable[[Tenant, dict[str, int]], Tenant]

MEASURE = (
    "what a change gives up: batch_size or max_seq_len, the fraction of the model's tokens in flight "
    "(batch_size x max_seq_len); min_blocks, the fraction of its full pool no longer guaranteed; a fixed "
    "memory_budget, the fraction of the budget; a reservation, all of it (1); switching to mode blocks, nothing (0)"
)


@dataclass(frozen=True)
class Suggestion:
    kind: str  # mode | batch_size | max_seq_len | min_blocks | memory_budget | drop_reservation
    subject: str  # the model or reservation it changes ('' for mode)
    old: object
    new: object
    given_up: Fraction
    plan: ModePlan  # the plan with the change applied: proof that it fits

    def describe(self) -> str:
        if self.kind == "mode":
            return "set mode: blocks (explicit kvcache_num_blocks pack tighter than even budget shares)"
        if self.kind == "drop_reservation":
            return f"drop reservation {self.subject} ({self.old:,} bytes per device)"
        return f"{self.subject}: {self.kind} {self.old!r} -> {self.new!r}"


@dataclass(frozen=True)
class DeploymentPlan:
    target: Target
    tenants: tuple[Tenant, ...]
    reservations: tuple[Reservation, ...]
    mode: str  # the configured mode: what a build uses
    budget: ModePlan
    blocks: ModePlan
    suggestions: tuple[Suggestion, ...] = ()

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
) -> DeploymentPlan:
    """Solve both modes; when ``mode`` has no plan, add the verified suggestions."""
    problem = Problem(target, tenants, reservations)
    budget, blocks = problem.solve(BUDGET), problem.solve(BLOCKS)
    plan = DeploymentPlan(target, tuple(tenants), tuple(reservations), mode, budget, blocks)
    if plan.feasible:
        return plan
    return replace(plan, suggestions=tuple(_suggestions(problem, plan, reshape)))


def _variant(
    problem: Problem, mode: str, tenants: Sequence[Tenant], reservations: Sequence[Reservation]
) -> ModePlan | None:
    """The plan with a change applied, when it fits (and the changed inputs are valid)."""
    try:
        changed = Problem(problem.target, tenants, reservations)
    except UserError:
        return None
    if not changed.fits_at_floors(mode):
        return None
    return changed.solve(mode)


def _with(tenants: Sequence[Tenant], index: int, tenant: Tenant) -> list[Tenant]:
    out = list(tenants)
    out[index] = tenant
    return out


def _suggestions(problem: Problem, plan: DeploymentPlan, reshape: Reshape | None) -> list[Suggestion]:
    mode, chosen = plan.mode, plan.chosen
    tenants, reservations = list(plan.tenants), list(plan.reservations)
    found: list[tuple[Fraction, int, Suggestion]] = []

    def add(order: int, suggestion: Suggestion) -> None:
        found.append((suggestion.given_up, order, suggestion))

    if mode == BUDGET and plan.blocks.feasible:
        add(-1, Suggestion("mode", "", BUDGET, BLOCKS, Fraction(0), plan.blocks))
    for index, tenant in enumerate(tenants):
        if tenant.name not in chosen.conflict:
            continue
        for suggestion in _tenant_changes(problem, mode, tenants, reservations, index, reshape):
            add(index, suggestion)
    for index, reservation in enumerate(reservations):
        rest = [r for r in reservations if r is not reservation]
        variant = _variant(problem, mode, tenants, rest)
        if variant is not None:
            add(
                len(tenants) + index,
                Suggestion("drop_reservation", reservation.name, reservation.nbytes, None, Fraction(1), variant),
            )
    return [s for _, _, s in sorted(found, key=lambda f: (f[0], f[1]))]


def _tenant_changes(
    problem: Problem,
    mode: str,
    tenants: list[Tenant],
    reservations: list[Reservation],
    index: int,
    reshape: Reshape | None,
) -> list[Suggestion]:
    tenant = tenants[index]
    out: list[Suggestion] = []
    demand = problem.demands[index]

    def first_fit(kind: str, old: object, candidates: Iterable[tuple[object, Tenant, Fraction]]) -> None:
        for new, changed, given_up in candidates:
            variant = _variant(problem, mode, _with(tenants, index, changed), reservations)
            if variant is not None:
                out.append(Suggestion(kind, tenant.name, old, new, given_up, variant))
                return

    if tenant.fixed:
        resolved = problem.fixed_resolution(demand)
        current = None if isinstance(resolved, str) else resolved[1]
        C = problem.target.num_chiplets
        budgets = sorted({demand.slice(n) * C for n, _ in problem.options(demand, BUDGET)}, reverse=True)
        if current is not None:
            budgets = [b for b in budgets if b < current]
        budgets = [b for b in budgets if b <= problem.target.npu.available_bytes]
        first_fit(
            "memory_budget",
            tenant.memory_budget,
            [
                (
                    b,
                    replace(tenant, memory_budget=b),
                    Fraction(max(current - b, 0), current) if current else Fraction(0),
                )
                for b in budgets
            ],
        )
    if tenant.min_blocks is not None and tenant.min_blocks > tenant.floor and not tenant.eager:
        first_fit(
            "min_blocks",
            tenant.min_blocks,
            [
                (n, replace(tenant, min_blocks=n), Fraction(tenant.min_blocks - n, tenant.full))
                for n in range(tenant.min_blocks - 1, tenant.floor - 1, -1)
            ],
        )
    if reshape is None:
        return out
    att = tenant.attention
    first_fit(
        "batch_size",
        att.batch_size,
        (  # lazily: each candidate needs a report
            (b, changed, Fraction(att.batch_size - b, att.batch_size))
            for b in range(att.batch_size - 1, 0, -1)
            if (changed := _reshaped(reshape, tenant, {"batch_size": b})) is not None
        ),
    )
    step = att.kvcache_partition_len if att.attn_impl == "flash_attn" else None
    if step:
        first_fit(
            "max_seq_len",
            att.max_seq_len,
            (
                (s, changed, Fraction(att.max_seq_len - s, att.max_seq_len))
                for s in range(att.max_seq_len - step, 0, -step)
                if (changed := _reshaped(reshape, tenant, {"max_seq_len": s})) is not None
            ),
        )
    return out


def _reshaped(reshape: Reshape, tenant: Tenant, change: dict[str, int]) -> Tenant | None:
    """The tenant at another geometry; None when the options are invalid there. A ``min_blocks`` that
    no longer lies between the new floor and full pool is dropped (the floor then applies)."""
    try:
        changed = reshape(tenant, change)
    except UserError:
        return None
    if changed.min_blocks is not None and not changed.floor <= changed.min_blocks <= changed.full:
        changed = replace(changed, min_blocks=None)
    return changed
