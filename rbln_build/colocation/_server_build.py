"""A deployment with a ``server`` key, built in one run: its server plan, and each card's models as cells.

``server_cells`` places the models on the server's cards (``server_plan_for``, from the same reports
as the one-card plan, staged into the build directory only when it fits) and turns every card that
holds models into a one-card deployment of its own (``CardBuild``): its models, its devices, and the
card's plan as the server plan made it (each model's budget, or in mode ``blocks`` its count). Its
cells are expanded exactly as a one-card deployment's (``cells_of``), so every cell is an ordinary
matrix cell of the one build: the cards share the build directory, its cache and its manifest, a
card whose cell fails does not lose the cells of the others, and a second identical run is a no-op.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from ..config import BuildSettings, Cell, Deployment
from ..deploy import DeploymentPlan
from ..deploy.server import ServerPlan
from ..errors import ConfigError
from ._colocation import cells_of
from ._server_cards import card_devices, server_plan_for

__all__ = ["CardBuild", "ServerBuild", "server_cells"]


@dataclass(frozen=True)
class CardBuild:
    """One card that holds models: a deployment of its own (its models, its devices, no server)."""

    card: int
    deployment: Deployment
    plan: DeploymentPlan  # the card's plan as the server plan made it (both modes: the server's)
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class ServerBuild:
    plan: ServerPlan
    cards: tuple[CardBuild, ...]  # the cards that hold models, in card order

    def card_of(self, name: str) -> CardBuild:
        return next(c for c in self.cards if any(m.name == name for m in c.deployment.models))


def server_cells(settings: BuildSettings, toolchain: dict[str, str]) -> tuple[ServerBuild, list[Cell]]:
    """The server plan, every card's build and the cells of all of them (card by card). A plan that
    does not fit is a ConfigError naming the reason and the command that prints the plan. Memoized
    per settings and toolchain, like ``deployment_cells``."""
    return _server_cells(settings, tuple(sorted(toolchain.items())))


@functools.lru_cache(maxsize=16)
def _server_cells(
    settings: BuildSettings, toolchain_items: tuple[tuple[str, str], ...]
) -> tuple[ServerBuild, list[Cell]]:
    d = settings.deployment
    assert d is not None and d.server is not None
    plan = server_plan_for(settings, stage=True)
    if not plan.feasible:
        raise ConfigError(
            f"deployment {d.name}: the {d.mode} plan of its server of {d.server.cards} card(s) does not fit, so "
            f"nothing was built: {plan.reason}. `rbln-build plan deployment={d.name}` (with the same overrides) "
            "prints the verdict."
        )
    cards = []
    for k, mp in enumerate(plan.cards):
        if not mp.assignments:
            continue
        names = {a.name for a in mp.assignments}
        models = tuple(m for m in d.models if m.name in names)
        card = replace(d, models=models, device_ids=card_devices(d, plan, k), server=None)
        tenants = tuple(t for t in plan.tenants if t.name in names)
        card_plan = DeploymentPlan(plan.server.target, tenants, d.reservations, d.mode, mp, mp, margins=d.margins)
        cells = cells_of(settings, card, mp.assignments, dict(toolchain_items))
        cards.append(CardBuild(k, card, card_plan, tuple(cells)))
    return ServerBuild(plan, tuple(cards)), [c for card in cards for c in card.cells]


def clear_cache() -> None:
    _server_cells.cache_clear()
