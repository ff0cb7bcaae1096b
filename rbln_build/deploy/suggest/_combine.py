"""Two changes together, when no single change makes a deployment fit.

The search, bounded by ``PLAN_LIMIT`` plans (each re-plan counts, and so does planning a changed
deployment to see what still conflicts), smallest first:

1. a first change at its extreme, for the deployment as configured: ``mode: blocks``; each other
   device target; dropping each reservation; no margin; for each model in a conflict, batch 1, the
   shortest length (flash attention) and ``min_blocks`` at its floor; dropping each model;
2. with it applied (when the deployment still does not fit), every single change that then fits,
   found exactly as ``suggestions`` finds them (a device is not a second change);
3. then the first change is made as small as it can be with the second applied (the largest batch,
   length, minimum, reservation or margin that fits), by the same single-change search.

Each combination's plan is the re-plan with both changes applied, so it fits. A pair found twice
(two dropped models, from either side) is kept once. The first changes are tried in the order above,
so the plans the limit allows go first to the changes that give up least.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from ...errors import EstimateError, UserError
from .._inputs import Margin, Margins, Reservation, Target, Tenant
from .._planner import BLOCKS, BUDGET, Problem
from ._change import Reshape, Retarget, Suggestion, Tally, counted
from ._single import reshaped, smaller_margin, smaller_reservation, suggestions, tenant_changes

__all__ = ["PLAN_LIMIT", "combinations"]

PLAN_LIMIT = 400  # plans a combination search may make, whatever the deployment's size


@dataclass(frozen=True)
class _State:
    target: Target
    mode: str
    tenants: tuple[Tenant, ...]
    reservations: tuple[Reservation, ...]
    margins: Margins

    def index(self, name: str) -> int | None:
        return next((i for i, t in enumerate(self.tenants) if t.name == name), None)


@dataclass(frozen=True)
class _Move:
    kind: str
    subject: str
    old: object
    new: object
    given_up: Fraction
    changed: Tenant | None = None  # a model's change: the model changed
    target: Target | None = None  # a device change: the target


def combinations(
    problem: Problem,
    mode: str,
    conflict: Sequence[str],
    reshape: Reshape | None,
    retarget: Retarget | None,
    targets: Sequence[Target],
    limit: int = PLAN_LIMIT,
) -> tuple[list[Suggestion], Tally]:
    """Pairs of changes that make the deployment fit (each with its verified plan), smallest total
    given up first, and the tally of plans the search made (at most ``limit``)."""
    base = _State(problem.target, mode, tuple(problem.tenants), tuple(problem.reservations), problem.margins)
    found: dict[frozenset[tuple[str, str]], tuple[Fraction, int, Suggestion]] = {}
    with counted(limit) as tally:
        for first in _first_moves(base, conflict, reshape, retarget, targets):
            if tally.exhausted:
                break
            state = _apply(base, first, reshape, retarget)
            if state is None:
                continue
            changed = Problem(state.target, state.tenants, state.reservations, state.margins, problem.solver)
            if not tally.spend(2):
                break
            chosen, blocks = changed.solve(state.mode), changed.solve(BLOCKS)
            if chosen.feasible:
                continue  # a single change after all (not one the single search makes): not a pair
            second_reshape = None if first.kind == "device" else reshape
            for second in suggestions(changed, state.mode, chosen, blocks, second_reshape, None, ()):
                pair = _relaxed(base, problem, first, second, reshape, retarget)
                key = frozenset((p.kind.removeprefix("drop_"), p.subject) for p in pair.parts)
                if key not in found or pair.given_up < found[key][0]:
                    found[key] = (pair.given_up, len(found), pair)
    return [s for _, _, s in sorted(found.values(), key=lambda f: (f[0], f[1]))], tally


def _first_moves(
    base: _State, conflict: Sequence[str], reshape: Reshape | None, retarget: Retarget | None, targets: Sequence[Target]
) -> Iterator[_Move]:
    if base.mode == BUDGET:
        yield _Move("mode", "", BUDGET, BLOCKS, Fraction(0))
    if retarget is not None:
        for other in targets:
            yield _Move("device", "", base.target.name, other.name, Fraction(0), target=other)
    for t in base.tenants:
        if t.name not in conflict:
            continue
        if t.min_blocks is not None and t.min_blocks > t.floor and not t.eager:
            yield _Move("min_blocks", t.name, t.min_blocks, t.floor, Fraction(t.min_blocks - t.floor, t.full))
        att = t.attention
        if reshape is not None and att.batch_size > 1:
            yield _Move("batch_size", t.name, att.batch_size, 1, Fraction(att.batch_size - 1, att.batch_size))
        step = att.kvcache_partition_len if att.attn_impl == "flash_attn" else None
        if reshape is not None and step and att.max_seq_len > step:
            yield _Move("max_seq_len", t.name, att.max_seq_len, step, Fraction(att.max_seq_len - step, att.max_seq_len))
    for r in base.reservations:
        yield _Move("drop_reservation", r.name, r.nbytes, None, Fraction(1))
    old = base.margins.default.on(base.target.available_per_chiplet)
    if old:
        yield _Move("margin", "", old, 0, Fraction(1))
    if len(base.tenants) > 2:  # a second change may drop another; one model must stay
        for t in base.tenants:
            yield _Move("drop_model", t.name, None, None, Fraction(1))


def _apply(
    state: _State, move: _Move | Suggestion, reshape: Reshape | None, retarget: Retarget | None
) -> _State | None:
    """The deployment with ``move`` applied (None when it cannot be: a report that fails there)."""
    kind, subject = move.kind, move.subject
    if kind == "mode":
        return replace(state, mode=BLOCKS)
    if kind == "device":
        other = move.target if isinstance(move, _Move) else None
        if other is None or retarget is None:
            return None
        try:
            tenants = tuple(retarget(t, other) for t in state.tenants)
        except (UserError, EstimateError):  # a model without a report there: no such change
            return None
        same = other.num_devices == state.target.num_devices  # as the single device change does
        return replace(
            state, target=other, tenants=tenants, margins=state.margins if same else Margins(state.margins.default)
        )
    if kind == "drop_model":
        return replace(state, tenants=tuple(t for t in state.tenants if t.name != subject))
    if kind in ("reservation", "drop_reservation"):
        kept = []
        for r in state.reservations:
            if r.name != subject:
                kept.append(r)
            elif kind == "reservation":
                kept.append(replace(r, nbytes=int(move.new)))  # type: ignore[call-overload]
        return replace(state, reservations=tuple(kept))
    if kind == "margin":
        return replace(state, margins=Margins(Margin(int(move.new)), state.margins.devices))  # type: ignore[call-overload]
    i = state.index(subject)
    if i is None:
        return None
    t = state.tenants[i]
    if kind in ("batch_size", "max_seq_len"):
        if reshape is None:
            return None
        got = reshaped(reshape, t, {kind: int(move.new)})  # type: ignore[call-overload]
        if got is None:
            return None
        t = got[0]
    elif kind == "min_blocks":
        t = replace(t, min_blocks=int(move.new))  # type: ignore[call-overload]
    elif kind == "memory_budget":
        t = replace(t, memory_budget=move.new)
    else:
        return None
    return replace(state, tenants=state.tenants[:i] + (t,) + state.tenants[i + 1 :])


def _relaxed(
    base: _State, problem: Problem, first: _Move, second: Suggestion, reshape: Reshape | None, retarget: Retarget | None
) -> Suggestion:
    """The pair, the first change made as small as it can be with the second applied (else at its extreme)."""
    plan = second.plan
    one = Suggestion(first.kind, first.subject, first.old, first.new, first.given_up, plan, changed=first.changed)
    if first.kind in ("min_blocks", "batch_size", "max_seq_len", "drop_reservation", "margin"):
        state = _apply(base, second, reshape, retarget)
        smaller = None if state is None else _smaller(state, problem, first, reshape)
        if smaller is not None:
            one, plan = smaller, smaller.plan
    parts = (replace(second, plan=plan), replace(one, plan=plan))
    return Suggestion("combination", "", None, None, sum((p.given_up for p in parts), Fraction(0)), plan, parts=parts)


def _smaller(state: _State, problem: Problem, first: _Move, reshape: Reshape | None) -> Suggestion | None:
    """The single-change search for ``first``'s kind on ``state``: the least of it that fits."""
    p = Problem(state.target, state.tenants, state.reservations, state.margins, problem.solver)
    tenants, reservations = list(state.tenants), list(state.reservations)
    if first.kind == "margin":
        return smaller_margin(p, state.mode, tenants, reservations)
    if first.kind == "drop_reservation":
        j = next((j for j, r in enumerate(reservations) if r.name == first.subject), None)
        return None if j is None else smaller_reservation(p, state.mode, tenants, reservations, j)
    i = state.index(first.subject)
    if i is None:
        return None
    found = tenant_changes(p, state.mode, tenants, reservations, i, reshape)
    return next((s for s in found if s.kind == first.kind), None)
