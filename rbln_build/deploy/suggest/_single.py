"""Changes that make an infeasible deployment fit, each verified by planning again with it applied.

Each suggestion changes one thing and keeps every other constraint as configured; when a change
forces another (a smaller batch whose full pool is below the model's ``min_blocks``), the suggestion
says so with the new value (``Suggestion.also``). Searched:

* ``mode``: explicit counts fit where budgets do not (a budget can only resolve to some counts);
* ``device``: another device target (``targets``) on which the whole deployment fits;
* ``batch_size`` / ``max_seq_len``: the largest smaller batch, the longest shorter length (a
  multiple of the partition under flash attention), for each model that cannot fit;
* ``min_blocks``: the largest smaller minimum, for a model that sets one;
* ``memory_budget``: the largest budget that fits, for a model with a fixed budget;
* ``reservation``: the largest size (whole MiB) at which a reservation fits, else ``drop_reservation``;
* ``margin``: the largest deployment margin (whole MiB per chiplet, 0 for none) at which it fits;
* ``drop_model``: the deployment without one of its models.

``given_up`` ranks them (``MEASURE``). A batch, length or device change needs the model's report
there: ``reshape`` and ``retarget`` provide it (the build layer asks the compile cache or the memory
model), so this module stays pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from fractions import Fraction

from ...errors import BuildError, EstimateError, UserError
from .._inputs import NO_MARGIN, Margin, Margins, Reservation, Target, Tenant
from .._modeplan import ModePlan
from .._planner import BLOCKS, BUDGET, DEFAULT_SOLVER, Problem, Solver, budget_value
from ._change import Also, Reshape, Retarget, Suggestion, out_of_plans, replan

__all__ = ["fits_alone_on", "smaller_margin", "smaller_reservation", "reshaped", "suggestions", "tenant_changes"]

MiB = 2**20


def _with(tenants: Sequence[Tenant], index: int, tenant: Tenant) -> list[Tenant]:
    out = list(tenants)
    out[index] = tenant
    return out


def fits_alone_on(
    name: str,
    tenants: Sequence[Tenant],
    reservations: Sequence[Reservation],
    mode: str,
    retarget: Retarget | None,
    targets: Sequence[Target],
    margins: Margins = NO_MARGIN,
    solver: Solver = DEFAULT_SOLVER,
) -> tuple[str, ...]:
    """The other device targets on which this model alone (with the reservations) fits."""
    if retarget is None:
        return ()
    tenant = next(t for t in tenants if t.name == name)
    out = []
    for target in targets:
        try:
            moved = retarget(tenant, target)
        except (UserError, EstimateError):
            continue
        if replan(target, mode, [moved], reservations, margins, solver) is not None:
            out.append(target.name)
    return tuple(out)


def suggestions(
    problem: Problem,
    mode: str,
    chosen: ModePlan,
    blocks: ModePlan,
    reshape: Reshape | None,
    retarget: Retarget | None,
    targets: Sequence[Target],
) -> list[Suggestion]:
    target = problem.target
    tenants, reservations = list(problem.tenants), list(problem.reservations)
    found: list[tuple[Fraction, int, Suggestion]] = []

    def add(order: int, suggestion: Suggestion) -> None:
        found.append((suggestion.given_up, order, suggestion))

    if mode == BUDGET and blocks.feasible:
        add(-2 * len(targets) - 2, Suggestion("mode", "", BUDGET, BLOCKS, Fraction(0), blocks))
    if retarget is not None:
        for i, other in enumerate(targets):
            try:
                moved = [retarget(t, other) for t in tenants]
            except (UserError, EstimateError):
                continue
            # per-device margins follow only onto a target of the same device count (overrides_for drops
            # them otherwise); the deployment's margin always does
            margins = problem.margins if other.num_devices == target.num_devices else Margins(problem.margins.default)
            variant = replan(other, mode, moved, reservations, margins, problem.solver)
            if variant is not None:
                add(-len(targets) - 1 + i, Suggestion("device", "", target.name, other.name, Fraction(0), variant))
    for index, tenant in enumerate(tenants):
        if tenant.name not in chosen.conflict:
            continue
        for suggestion in tenant_changes(problem, mode, tenants, reservations, index, reshape):
            add(index, suggestion)
    n = len(tenants)
    lowered = smaller_margin(problem, mode, tenants, reservations)
    if lowered is not None:
        add(n + len(reservations) - 1, lowered)  # after the reservations, before dropping a model
    for index in range(len(reservations)):
        smaller = smaller_reservation(problem, mode, tenants, reservations, index)
        if smaller is not None:
            add(n + index, smaller)
    if n > 1:
        for index, tenant in enumerate(tenants):
            variant = replan(
                target, mode, tenants[:index] + tenants[index + 1 :], reservations, problem.margins, problem.solver
            )
            if variant is not None:
                add(
                    n + len(reservations) + index,
                    Suggestion("drop_model", tenant.name, None, None, Fraction(1), variant),
                )
    return [s for _, _, s in sorted(found, key=lambda f: (f[0], f[1]))]


def smaller_margin(
    problem: Problem, mode: str, tenants: list[Tenant], reservations: list[Reservation]
) -> Suggestion | None:
    """The largest deployment margin (whole MiB per chiplet) at which the plan fits, verified by
    planning again: the room the lower bounds and the reservations leave on every chiplet of the
    devices that take the deployment's margin (a device with its own margin keeps it)."""
    target, margins = problem.target, problem.margins
    old = margins.default.on(target.available_per_chiplet)
    floors = problem.at_floors(mode, with_reserved=False)
    if not old or floors is None:
        return None
    own = dict(margins.devices)
    room = []
    for k, (node, _) in enumerate(target.buckets()):
        left = target.available_per_chiplet - problem.reserved[k] - floors[k]
        if node in own:
            if left < problem.margin[k]:
                return None  # a device's own margin is in the way: lowering the deployment's does not help
            continue
        room.append(left)
    if not room or min(room) < 0:
        return None
    new = min(min(room) // MiB * MiB, (old - 1) // MiB * MiB)
    variant = replan(target, mode, tenants, reservations, Margins(Margin(new), margins.devices), problem.solver)
    if variant is None:
        if out_of_plans():
            return None
        raise BuildError(f"planner: a margin of {new} bytes should fit and does not; a bug.")
    return Suggestion("margin", "", old, new, Fraction(old - new, old), variant)


def smaller_reservation(
    problem: Problem, mode: str, tenants: list[Tenant], reservations: list[Reservation], index: int
) -> Suggestion | None:
    """The largest whole number of MiB below the reservation's size at which the plan fits (else,
    when dropping it fits, that), verified by planning again. The plan fits exactly when the lower
    bounds fit, so the size is the room the lower bounds and the other reservations leave: on its
    chiplet of every device, or (spread) ``num_chiplets`` times the least room of any chiplet."""
    r = reservations[index]
    target = problem.target
    rest = reservations[:index] + reservations[index + 1 :]
    floors = problem.at_floors(mode, with_reserved=False)
    if floors is None:
        return None  # a fixed budget fails: no reservation is to blame
    C = target.num_chiplets
    others = [0] * C
    for x in rest:
        others = [a + b for a, b in zip(others, x.per_chiplet(C), strict=True)]
    room = [
        target.available_per_chiplet - f - others[c] - m
        for f, (_, c), m in zip(floors, target.buckets(), problem.margin, strict=True)
    ]
    if min(room) < 0:
        return None  # not even dropping it fits
    if r.chiplet is None:
        largest = min(room) * C  # each chiplet holds ceil(nbytes / C) <= min(room)
    else:
        largest = min(x for x, (_, c) in zip(room, target.buckets(), strict=True) if c == r.chiplet)
    k = min(largest // MiB, (r.nbytes - 1) // MiB)
    if k >= 1:
        nbytes = k * MiB
        variant = replan(
            target,
            mode,
            tenants,
            [*reservations[:index], replace(r, nbytes=nbytes), *rest[index:]],
            problem.margins,
            problem.solver,
        )
        if variant is None:
            if out_of_plans():
                return None
            raise BuildError(f"planner: reservation {r.name} at {nbytes} bytes should fit and does not; a bug.")
        return Suggestion("reservation", r.name, r.nbytes, nbytes, Fraction(r.nbytes - nbytes, r.nbytes), variant)
    variant = replan(target, mode, tenants, rest, problem.margins, problem.solver)
    if variant is None:
        return None
    return Suggestion("drop_reservation", r.name, r.nbytes, None, Fraction(1), variant)


def tenant_changes(
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

    def first_fit(kind: str, old: object, candidates: Iterable[tuple[object, Tenant, Fraction, Also]]) -> None:
        for new, changed, given_up, also in candidates:
            variant = replan(
                problem.target, mode, _with(tenants, index, changed), reservations, problem.margins, problem.solver
            )
            if variant is not None:
                out.append(Suggestion(kind, tenant.name, old, new, given_up, variant, also, changed))
                return

    if tenant.fixed:
        resolved = problem.fixed_resolution(demand)
        current = None if isinstance(resolved, str) else resolved[1]
        C = problem.target.num_chiplets
        budgets = sorted({demand.slice(n) * C for n, _ in problem.options(demand, BUDGET)}, reverse=True)
        if current is not None:
            budgets = [b for b in budgets if b < current]
        budgets = [b for b in budgets if 0 < b <= problem.target.npu.available_bytes]
        first_fit(
            "memory_budget",
            tenant.memory_budget,
            [
                (
                    budget_value(b),
                    replace(tenant, memory_budget=budget_value(b)),
                    Fraction(max(current - b, 0), current) if current else Fraction(0),
                    (),
                )
                for b in budgets
            ],
        )
    if tenant.min_blocks is not None and tenant.min_blocks > tenant.floor and not tenant.eager:
        first_fit(
            "min_blocks",
            tenant.min_blocks,
            [
                (n, replace(tenant, min_blocks=n), Fraction(tenant.min_blocks - n, tenant.full), ())
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
            (b, changed[0], Fraction(att.batch_size - b, att.batch_size), changed[1])
            for b in range(att.batch_size - 1, 0, -1)
            if (changed := reshaped(reshape, tenant, {"batch_size": b})) is not None
        ),
    )
    step = att.kvcache_partition_len if att.attn_impl == "flash_attn" else None
    if step:
        first_fit(
            "max_seq_len",
            att.max_seq_len,
            (
                (s, changed[0], Fraction(att.max_seq_len - s, att.max_seq_len), changed[1])
                for s in range(att.max_seq_len - step, 0, -step)
                if (changed := reshaped(reshape, tenant, {"max_seq_len": s})) is not None
            ),
        )
    return out


def reshaped(reshape: Reshape, tenant: Tenant, change: dict[str, int]) -> tuple[Tenant, Also] | None:
    """The tenant at another geometry, keeping its ``min_blocks`` where it still lies between the new
    floor and full pool; else moved to the nearest of the two, and that change is returned too.
    None when the options are invalid there."""
    try:
        changed = reshape(tenant, change)
    except (UserError, EstimateError):
        return None
    minimum = tenant.min_blocks
    if minimum is None or changed.eager or changed.floor <= minimum <= changed.full:
        return replace(changed, min_blocks=minimum), ()
    moved = min(max(minimum, changed.floor), changed.full)
    return replace(changed, min_blocks=moved), (("min_blocks", minimum, moved),)
