"""A server: several cards of one device target, and the plan that places each model on one of them.

* ``Server``: the device target a model is compiled for (``Target``: one NPU, or a tensor-parallel
  group of ``num_devices``) and the server's cards, each one group of that target with its own
  reservations and margins (``Card``). Card ``k`` is the devices ``k * num_devices`` up to
  ``(k + 1) * num_devices - 1`` of the server (what ``RBLN_VISIBLE_DEVICES`` lists for its models).
* ``plan_server``: each model on one card (or the card it is pinned to), at one count, by the
  single-card planner's accounting on every card, chiplet by chiplet, with the card's reservations
  and margin; solved with CP-SAT (``_pack``: the objective and the placement's tie-break).
* ``ServerPlan``: the placement, each card's plan (a ``ModePlan`` of the models on it, assembled
  by the single-card planner, so every budget is checked through the estimator), the objective
  over the whole server, and, when nothing fits, a verdict naming each model that cannot fit on any
  card it may use even alone, with its shortfall.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from ...errors import ConfigError
from .._inputs import NO_MARGIN, Margins, Reservation, Target, Tenant
from .._modeplan import ModePlan, Objective, Proof
from .._planner import Problem
from .._terms import BUDGET, CP_SAT, DEFAULT_SOLVER, MODES, Solver
from ._pack import Item, fits, pack

__all__ = ["Card", "Server", "ServerPlan", "Shortfall", "plan_server"]


@dataclass(frozen=True)
class Card:
    """One card (a device group of the server's target): what it holds back for others."""

    reservations: tuple[Reservation, ...] = ()
    margins: Margins = NO_MARGIN  # node index: a device of the group


@dataclass(frozen=True)
class Server:
    target: Target
    cards: tuple[Card, ...]

    def device_ids(self, card: int) -> tuple[int, ...]:
        n = self.target.num_devices
        return tuple(range(card * n, (card + 1) * n))


@dataclass(frozen=True)
class Shortfall:
    """A model that fits no card it may use even alone, at its lower bound: ``nbytes`` more than the
    room of (card, device, chiplet), the least short of them."""

    name: str
    lower_bound: int
    nbytes: int
    card: int
    node: int
    chiplet: int
    why: str  # what sets the lower bound (its floor, min_blocks, or its traffic)

    @property
    def reason(self) -> str:
        return (
            f"{self.name} at {self.lower_bound} blocks ({self.why}) fits no card it may use even alone: "
            f"{self.nbytes:,} B short on card {self.card}, device {self.node}, chiplet {self.chiplet}, the least short"
        )


@dataclass(frozen=True)
class ServerPlan:
    server: Server
    tenants: tuple[Tenant, ...]
    mode: str
    feasible: bool
    placement: tuple[tuple[str, int], ...]  # model -> card, in the deployment's order
    cards: tuple[ModePlan, ...]  # per card: its models' plan (no assignments: an empty card)
    objective: Objective | None
    proof: Proof
    reason: str | None = None
    shortfalls: tuple[Shortfall, ...] = ()
    solves: int = 0  # CP-SAT solves made (the max-min search's feasibility steps, then the stages)
    fits_on: int | None = None  # infeasible: the fewest cards (more cards like the last one) that hold them

    def card_of(self, name: str) -> int:
        return dict(self.placement)[name]

    def counts(self) -> dict[str, int]:
        return {a.name: a.kvcache_num_blocks for mp in self.cards for a in mp.assignments}


def _why(t: Tenant) -> str:
    if t.fixed:
        return f"its fixed memory_budget {t.memory_budget!r}"
    if t.traffic is not None and t.traffic_blocks == t.lower_bound and t.lower_bound > t.floor:
        return f"its traffic: {t.traffic.describe(t.attention)}"
    if t.min_blocks is not None and t.min_blocks == t.lower_bound and t.lower_bound > t.floor:
        return "its min_blocks"
    return "its floor" if not t.eager else "its full pool (eager attention)"


def plan_server(
    server: Server,
    tenants: Sequence[Tenant],
    mode: str = BUDGET,
    pins: Mapping[str, int] | None = None,
    solver: Solver = DEFAULT_SOLVER,
) -> ServerPlan:
    """Place every model on a card and plan its count (``pins``: model -> the card it must use)."""
    if mode not in MODES:
        raise ConfigError(f"deployment.mode: expected one of {', '.join(MODES)}, got {mode!r}.")
    if not server.cards:
        raise ConfigError("deployment.server.cards: a server needs at least one card.")
    pins = dict(pins or {})
    for name, k in pins.items():
        if name not in {t.name for t in tenants}:
            raise ConfigError(f"deployment: a card is pinned for {name!r}, which is not one of its models.")
        if not 0 <= k < len(server.cards):
            raise ConfigError(
                f"deployment model {name}: card {k} does not exist (the server has {len(server.cards)} card(s): "
                f"0..{len(server.cards) - 1})."
            )
    target = server.target
    problem = Problem(target, tenants, server.cards[0].reservations, server.cards[0].margins, solver)
    holds = [problem] + [Problem(target, tenants[:1], c.reservations, c.margins) for c in server.cards[1:]]
    rooms = [p.capacity() for p in holds]
    items, shortfalls, failing = [], [], []
    for d in problem.demands:
        t = d.tenant
        allowed = (pins[t.name],) if t.name in pins else tuple(range(len(server.cards)))
        if t.fixed:
            resolved = problem.fixed_resolution(d)
            if isinstance(resolved, str):
                failing.append(f"{t.name}: {resolved}")
                continue
            options: tuple[tuple[int, tuple[int, ...]], ...] = ((resolved[0], d.need(resolved[0])),)
        else:
            options = tuple(problem.options(d, mode))
        items.append(Item(options, allowed, t.full, None if t.fixed else t.weight))
        bound = options[0][0] if t.fixed else t.lower_bound  # what it needs there: no option needs less
        short = _shortfall(t, (bound, d.need(bound)), allowed, rooms, target)
        if short is not None:
            shortfalls.append(short)
    proof = Proof(CP_SAT)
    if failing or shortfalls:
        reason = "; ".join([*failing, *(s.reason for s in shortfalls)])
        return _infeasible(server, tenants, mode, proof, reason, tuple(shortfalls), holds)
    packed = pack(items, rooms, solver.time_limit, solver.workers)
    if packed is None:
        reason = (
            f"no placement of the {len(tenants)} model(s), each at its lower bound, fits the server's "
            f"{len(server.cards)} card(s) together, though each fits a card alone"
        )
        more = _fewest_cards(items, [t.name in pins for t in tenants], rooms, solver)
        if more is not None:
            reason += f"; they fit on {more} cards (the added ones like card {len(rooms) - 1})"
        plan = _infeasible(server, tenants, mode, proof, reason, (), holds)
        return plan if more is None else replace(plan, fits_on=more)
    proof = Proof(CP_SAT, packed.optimal, packed.gap, packed.note)
    placement = tuple((t.name, k) for t, k in zip(tenants, packed.cards, strict=True))
    counts = dict(zip((t.name for t in tenants), packed.counts, strict=True))
    cards = []
    for k, card in enumerate(server.cards):
        here = [t for t, kk in zip(tenants, packed.cards, strict=True) if kk == k]
        if not here:
            cards.append(_empty(holds[k], mode))
            continue
        p = Problem(target, here, card.reservations, card.margins, solver)
        cards.append(p._assemble(mode, {t.name: counts[t.name] for t in here if not t.fixed}, 0, proof))
    planned = [(t, counts[t.name]) for t in tenants if not t.fixed]
    shares = [Fraction(n, t.full) for t, n in planned]
    objective = Objective(
        min_share=min(shares, default=Fraction(1)),
        weighted_share=sum((t.weight * s for (t, _), s in zip(planned, shares, strict=True)), Fraction(0)),
        total_blocks=sum(n for _, n in planned),
    )
    return ServerPlan(
        server, tuple(tenants), mode, True, placement, tuple(cards), objective, proof, solves=packed.solves
    )


def _shortfall(
    t: Tenant,
    first: tuple[int, tuple[int, ...]],
    allowed: tuple[int, ...],
    rooms: list[tuple[int, ...]],
    target: Target,
) -> Shortfall | None:
    count, need = first
    worst = []
    for k in allowed:
        over = max(range(len(need)), key=lambda b: need[b] - rooms[k][b])
        worst.append((need[over] - rooms[k][over], k, over))
    nbytes, k, b = min(worst)
    if nbytes <= 0:
        return None
    node, chiplet = target.buckets()[b]
    return Shortfall(t.name, count, nbytes, k, node, chiplet, _why(t))


def _fewest_cards(items: list[Item], pinned: list[bool], rooms: list[tuple[int, ...]], solver: Solver) -> int | None:
    """The fewest cards, up to one per model, that hold every model at its lower bound, the added
    cards like the last one and open to every model that is not pinned (verified by CP-SAT)."""
    for total in range(len(rooms) + 1, len(items) + 1):
        added = tuple(range(len(rooms), total))
        more = [it if pin else replace(it, cards=(*it.cards, *added)) for it, pin in zip(items, pinned, strict=True)]
        answer = fits(more, [*rooms, *(rooms[-1],) * len(added)], solver.time_limit, solver.workers)
        if answer is None:
            return None
        if answer:
            return total
    return None


def _empty(p: Problem, mode: str) -> ModePlan:
    return ModePlan(mode, p.target, True, (), p.reserved, None, margin=p.margin, proof=Proof(CP_SAT))


def _infeasible(
    server: Server,
    tenants: Sequence[Tenant],
    mode: str,
    proof: Proof,
    reason: str,
    shortfalls: tuple[Shortfall, ...],
    holds: list[Problem],
) -> ServerPlan:
    cards = tuple(_empty(p, mode) for p in holds)
    return ServerPlan(server, tuple(tenants), mode, False, (), cards, None, proof, reason, shortfalls)
