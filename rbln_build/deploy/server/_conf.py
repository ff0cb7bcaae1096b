"""A deployment's ``server`` key, as the config (or ``plan --cards/--pin``) gives it, checked.

``deployment.server: {cards: N, pins: {MODEL: CARD}}`` places the deployment's models on ``N`` cards
of its device target (``plan_server``) instead of sharing one; ``pins`` fixes some models' cards.
``config._deployment`` reads the node; the rules and their one-line errors live here, beside the
server planner (as ``_traffic_conf`` does for a model's traffic).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError

__all__ = ["MAX_CARDS", "ServerSpec", "server_from"]

MAX_CARDS = 64  # cards of one server (a host holds at most 16 NPUs today)


@dataclass(frozen=True)
class ServerSpec:
    """``cards`` cards of the deployment's device target; ``pins``: (model, card) fixed, in listed order."""

    cards: int
    pins: tuple[tuple[str, int], ...] = ()

    def pin_map(self) -> dict[str, int]:
        return dict(self.pins)


def _card_count(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_CARDS:
        raise ConfigError(
            f"{where}: expected a whole number of cards from 1 to {MAX_CARDS}, got {value!r}; "
            "set it to the cards of the server the models are placed on."
        )
    return value


def server_from(
    node: Mapping[str, Any] | None, names: Sequence[str], where: str = "deployment.server"
) -> ServerSpec | None:
    """The ``server`` mapping (``cards``, ``pins``; None: no server) checked against the deployment's
    model ``names``: one ConfigError naming the key, what it got and what to do."""
    if node is None:
        return None
    if not isinstance(node, Mapping):
        raise ConfigError(f"{where}: expected a mapping {{cards: N, pins: {{MODEL: CARD}}}}, got {node!r}.")
    for key in node:
        if key not in ("cards", "pins"):
            close = difflib.get_close_matches(str(key), ["cards", "pins"], n=1, cutoff=0.6)
            hint = f"did you mean {where}.{close[0]}? " if close else ""
            raise ConfigError(
                f"{where}.{key}: not a server key; {hint}a server is {{cards: N, pins: {{MODEL: CARD}}}}."
            )
    if "cards" not in node:
        raise ConfigError(f"{where}.cards: missing; give the server's number of cards ({{cards: 2}}).")
    cards = _card_count(node["cards"], f"{where}.cards")
    given = node.get("pins") or {}
    if not isinstance(given, Mapping):
        raise ConfigError(f"{where}.pins: expected a mapping of a model's name to its card, got {given!r}.")
    pins = []
    for name, card in given.items():
        if name not in names:
            close = difflib.get_close_matches(str(name), list(names), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ConfigError(
                f"{where}.pins.{name}: not a model of the deployment; {hint}its models: {', '.join(names)}."
            )
        if not isinstance(card, int) or isinstance(card, bool) or not 0 <= card < cards:
            raise ConfigError(
                f"{where}.pins.{name}: card {card!r} does not exist (the server has {cards} card(s): 0..{cards - 1}); "
                "pin it to one of them or raise cards."
            )
        pins.append((str(name), card))
    order = {n: i for i, n in enumerate(names)}
    return ServerSpec(cards, tuple(sorted(pins, key=lambda p: order[p[0]])))
