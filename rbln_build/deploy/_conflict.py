"""Why a plan does not fit: every model that cannot reach its lower bound, each with its reason.

A model *cannot fit* when it belongs to a minimal set of models whose lower bounds (floor,
``min_blocks``, or the count a fixed budget resolves to), plus the reservations, do not fit some
(node, chiplet) together, while every smaller part of that set does: a minimal conflict. A model
whose lower bound does not fit even alone (with the reservations) is its own minimal conflict; a
fixed budget the estimator rejects is one too. Fitting at the lower bounds is monotone (a superset
of a conflict is a conflict), so the minimal conflicts are the sets that do not fit while every set
one model smaller does. They are enumerated exactly up to ``EXACT_MODELS`` models that fit alone;
beyond that, one minimal conflict is found by a deletion filter (each model in turn is left out when
the rest still conflict), and the reason says so.

Pure: integers only.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._inputs import Tenant
    from ._planner import Problem

__all__ = ["Conflict", "find_conflicts", "bound_text", "EXACT_MODELS"]

EXACT_MODELS = 12
MiB = 2**20


@dataclass(frozen=True)
class Conflict:
    """One model that cannot fit: ``alone`` when it cannot reach its lower bound on this target even
    alone (with the reservations); else ``partners``, the minimal sets of other models it cannot fit with."""

    name: str
    alone: bool
    partners: tuple[tuple[str, ...], ...]
    reason: str


def _mib(n: int) -> str:
    return f"{n // MiB:,}" if n % MiB == 0 else f"{n / MiB:,.2f}"


def _where(problem: Problem, members: Sequence[str], mode: str) -> str:
    """The (node, chiplet) where the members' lower bounds overflow most, and by how much."""
    need = problem.at_floors(mode, set(members), with_reserved=False)
    assert need is not None
    room = problem.capacity()
    k = max(range(len(room)), key=lambda i: (need[i] - room[i], -i))
    node, chiplet = problem.target.buckets()[k]
    where = f"chiplet {chiplet}" if problem.target.num_devices == 1 else f"device {node} chiplet {chiplet}"
    held = [what for what, n in (("the reservations", problem.reserved[k]), ("the margin", problem.margin[k])) if n]
    left = f"left by {' and '.join(held)}" if held else "available"
    return f"on {where} {'they need' if len(members) > 1 else 'it needs'} {_mib(need[k])} MiB, " + (
        f"{_mib(need[k] - room[k])} MiB more than the {_mib(room[k])} MiB {left}"
    )


def bound_text(t: Tenant) -> str:
    if t.fixed:
        return f"count at its fixed memory_budget {t.memory_budget!r}"
    if t.eager:
        what = "full pool (eager attention)"
    elif t.lower_bound == t.floor:
        what = "floor"
    elif t.lower_bound == (t.min_blocks or 0):
        what = "min_blocks"
    else:
        assert t.traffic is not None
        what = f"traffic need ({t.traffic.describe(t.attention)})"
    return f"{what} of {t.lower_bound} blocks"


def find_conflicts(problem: Problem, mode: str) -> tuple[Conflict, ...]:
    """Every model that cannot fit, in the deployment's order (empty when the lower bounds fit)."""
    target = problem.target
    held = f" with the reservations ({', '.join(r.name for r in problem.reservations)})" if problem.reservations else ""
    names = [t.name for t in problem.tenants]
    bounds = {t.name: bound_text(t) for t in problem.tenants}
    out: dict[str, Conflict] = {}
    if max(r + m for r, m in zip(problem.reserved, problem.margin, strict=True)) > target.available_per_chiplet:
        return ()  # the reservations (and the margin) alone do not fit: no model is to blame
    for d in problem.demands:
        fixed = problem.fixed_resolution(d) if d.tenant.fixed else None
        name = d.tenant.name
        if isinstance(fixed, str):
            out[name] = Conflict(name, True, (), f"{name} cannot reach its floor on {target.name} with {fixed}")
        elif not problem.fits_at_floors(mode, {name}):
            out[name] = Conflict(
                name,
                True,
                (),
                f"{name} cannot reach its {bounds[name]} on {target.name} even alone{held}: "
                + _where(problem, [name], mode),
            )
    rest = [n for n in names if n not in out]
    minimal: list[tuple[str, ...]] = []
    exact = len(rest) <= EXACT_MODELS
    if exact:
        for size in range(2, len(rest) + 1):
            for combo in itertools.combinations(rest, size):
                if any(set(m) <= set(combo) for m in minimal):
                    continue  # a superset of a conflict: not minimal
                if not problem.fits_at_floors(mode, set(combo)):
                    minimal.append(combo)
    elif not problem.fits_at_floors(mode, set(rest)):
        members = list(rest)
        for name in list(members):
            trial = [m for m in members if m != name]
            if not problem.fits_at_floors(mode, set(trial)):
                members = trial
        minimal.append(tuple(members))
    for name in rest:
        mine = [m for m in minimal if name in m]
        if not mine:
            continue
        partners = tuple(tuple(x for x in m if x != name) for m in mine)
        first = mine[0]
        listed = ", ".join(f"{m} {bounds[m]}" for m in first)
        more = "" if len(partners) == 1 else f" (also with {'; '.join(' + '.join(p) for p in partners[1:])})"
        scope = "" if exact else " (one minimal conflict shown: too many models to list them all)"
        out[name] = Conflict(
            name,
            False,
            partners,
            f"{name} fits alone but not together with {' + '.join(partners[0])}{more}: their lower bounds "
            f"({listed}){held} do not fit; " + _where(problem, first, mode) + scope,
        )
    return tuple(out[n] for n in names if n in out)
