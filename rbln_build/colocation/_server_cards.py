"""A configured deployment placed on a server of several cards, and each card as a deployment of its own.

``server_plan_for`` plans the deployment's models on ``cards`` cards of its device target (each card
one device group, holding the deployment's reservations and margins) with
``rbln_build.deploy.server``, from the same reports as ``plan_for``. ``card_overrides`` turns the
placement into one ordinary one-card deployment per card that holds models: the overrides that keep
only that card's models, each with its planned ``memory_budget`` fixed (so its cell is the one the
server plan counted, and the card's own plan checks the fit again), its port, and the card's devices
as ``serve.device_ids`` (``RBLN_VISIBLE_DEVICES`` in every serve command). Build and serve each card
with them: ``rbln-build deployment=<name> <overrides>``, ``rbln-build serve-command ...``.
"""

from __future__ import annotations

from ..config import BuildSettings, Deployment
from ..deploy import BUDGET
from ..deploy.server import Card, Server, ServerPlan, plan_server
from ..errors import ConfigError
from ._colocation import Tenants
from ._deploy_overrides import _mapping, _model_entry

__all__ = ["card_devices", "card_overrides", "server_plan_for"]


def server_plan_for(settings: BuildSettings, stage: bool = False) -> ServerPlan:
    """The deployment's models placed on the cards of its ``server`` (``deployment.server``, or what
    ``plan --cards/--pin`` put there), in its mode. ``stage``: the reports read are written to the build
    directory only when the plan fits (a build's planning)."""
    tenants = Tenants(settings, stage)
    d = tenants.deployment
    if d.server is None:
        raise ConfigError(f"deployment {d.name}: it names no server; set deployment.server.cards (or plan --cards N).")
    server = Server(tenants.target, (Card(d.reservations, d.margins),) * d.server.cards)
    pins = d.server.pin_map()
    return tenants.settle(lambda built: plan_server(server, built, d.mode, pins, d.solver))


def card_devices(d: Deployment, plan: ServerPlan, card: int) -> tuple[int, ...]:
    """The devices of ``card``: its share of ``serve.device_ids`` when that lists every card's, else
    the server's own numbering (card ``k``: devices ``k * num_devices`` on)."""
    n = plan.server.target.num_devices
    if len(d.device_ids) == n * len(plan.server.cards):
        return d.device_ids[card * n : (card + 1) * n]
    return plan.server.device_ids(card)


def card_overrides(d: Deployment, plan: ServerPlan, configured: bool = False) -> list[tuple[int, list[str]]]:
    """(card, the overrides that make it a deployment of its own) for every card that holds models;
    ``configured``: the deployment's config names the server (the card's overrides drop it)."""
    if not plan.feasible:
        raise ConfigError(f"deployment {d.name}: the server plan does not fit ({plan.reason}); nothing to build.")
    if plan.mode != BUDGET:
        raise ConfigError(
            f"deployment {d.name}: a card is built as a deployment of its own with each model's planned "
            "memory_budget fixed; plan the server in mode budget (deployment.mode=budget)."
        )
    out = []
    for k, card in enumerate(plan.cards):
        if not card.assignments:
            continue
        entries = []
        for a in card.assignments:
            entry = _model_entry(d.model(a.name))
            entry.update(memory_budget=a.memory_budget, min_blocks=None, traffic=None, weight=None)
            entries.append(_mapping(entry))
        ids = ",".join(str(i) for i in card_devices(d, plan, k))
        out.append(
            (
                k,
                [
                    *(["deployment.server=null"] if configured else []),
                    "deployment.mode=budget",
                    "deployment.models=[" + ",".join(entries) + "]",
                    f"deployment.serve.device_ids=[{ids}]",
                ],
            )
        )
    return out
