"""A suggested change (``Suggestion``), and the one way every change is checked: planning again.

``replan`` plans a changed deployment and keeps the plan only when it fits; every suggestion's plan
comes from it. Within ``counted(limit)`` it counts the plans it makes and, past the limit, makes no
more (answers None, as for a change that does not fit): that is how the combination search is
bounded by a number of plans, not by the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from fractions import Fraction

from ...errors import EstimateError, UserError
from .._inputs import NO_MARGIN, Margins, Reservation, Target, Tenant
from .._modeplan import ModePlan
from .._planner import DEFAULT_SOLVER, Problem, Solver

__all__ = ["Also", "MEASURE", "Reshape", "Retarget", "Suggestion", "Tally", "counted", "out_of_plans", "replan"]

Reshape = Callable[[Tenant, dict[str, int]], Tenant]
Retarget = Callable[[Tenant, Target], Tenant]
Also = tuple[tuple[str, object, object], ...]

MEASURE = (
    "what a change gives up: batch_size or max_seq_len, the fraction of the model's tokens in flight "
    "(batch_size x max_seq_len); min_blocks, the fraction of its full pool no longer guaranteed; a fixed "
    "memory_budget, the fraction of the budget; a reservation or the margin, the fraction of its bytes; dropping a model, "
    "all of it (1); switching to mode blocks or to another device target, nothing of the models (0); "
    "a combination of changes, the sum of its changes'"
)


@dataclass(frozen=True)
class Suggestion:
    kind: str  # mode | device | batch_size | max_seq_len | min_blocks | memory_budget | reservation | drop_reservation | margin | drop_model | combination
    subject: str  # the model or reservation it changes ('' for mode, device and combination)
    old: object
    new: object
    given_up: Fraction
    plan: ModePlan  # the plan with the change applied: proof that it fits
    also: Also = ()  # further changes it makes: (key, old, new)
    changed: Tenant | None = None  # a model's change: the model changed (its report at a new geometry)
    parts: tuple[Suggestion, ...] = ()  # a combination: its single changes, all applied in ``plan``

    def describe(self) -> str:
        if self.kind == "combination":
            return " AND ".join(p.describe() for p in self.parts)
        if self.kind == "mode":
            return "set mode: blocks (explicit kvcache_num_blocks: every count, not only those a budget resolves to)"
        if self.kind == "device":
            return f"device {self.old} -> {self.new} (the whole deployment on another device target)"
        if self.kind == "drop_model":
            return f"drop model {self.subject}"
        if self.kind == "drop_reservation":
            return f"drop reservation {self.subject} ({self.old:,} bytes per device)"
        if self.kind == "reservation":
            return f"reservation {self.subject}: bytes {self.old:,} -> {self.new:,} (the largest whole MiB that fits)"
        if self.kind == "margin":
            what = "no margin" if not self.new else "the largest whole MiB that fits"
            return f"margin: {self.old:,} -> {self.new:,} bytes per chiplet ({what})"
        text = f"{self.subject}: {self.kind} {self.old!r} -> {self.new!r}"
        for key, old, new in self.also:
            text += f", {key} {old!r} -> {new!r}"
        return text


@dataclass
class Tally:
    """Plans made within ``counted``; past ``limit`` none is made."""

    limit: int
    plans: int = 0

    @property
    def exhausted(self) -> bool:
        return self.plans >= self.limit

    def spend(self, n: int) -> bool:
        """Count ``n`` plans made outside ``replan``; False (and none counted) when they would pass the limit."""
        if self.plans + n > self.limit:
            return False
        self.plans += n
        return True


_TALLY: ContextVar[Tally | None] = ContextVar("rbln_build_suggest_tally", default=None)


@contextmanager
def counted(limit: int) -> Iterator[Tally]:
    tally = Tally(limit)
    token = _TALLY.set(tally)
    try:
        yield tally
    finally:
        _TALLY.reset(token)


def out_of_plans() -> bool:
    """Whether ``replan`` answered None only because the count's limit was reached."""
    tally = _TALLY.get()
    return tally is not None and tally.exhausted


def replan(
    target: Target,
    mode: str,
    tenants: Sequence[Tenant],
    reservations: Sequence[Reservation],
    margins: Margins = NO_MARGIN,
    solver: Solver = DEFAULT_SOLVER,
) -> ModePlan | None:
    """The plan with a change applied, when it fits (and the changed inputs are valid), under the
    deployment's margins."""
    tally = _TALLY.get()
    if tally is not None:
        if tally.exhausted:
            return None
        tally.plans += 1
    try:
        changed = Problem(target, tenants, reservations, margins, solver)
        if not changed.fits_at_floors(mode):
            return None
        return changed.solve(mode)
    except (UserError, EstimateError):
        return None
