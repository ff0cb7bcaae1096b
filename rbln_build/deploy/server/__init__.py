"""Co-location on a server: each model placed on one of several cards of one device target.

_server  the server (its cards, each with its reservations and margins), the plan, the verdict
_conf    the deployment's ``server`` key (cards, pins), checked
_pack    placement and counts as one constraint program (OR-Tools CP-SAT, the ``solver`` extra)
"""

from __future__ import annotations

from ._conf import MAX_CARDS, ServerSpec, server_from
from ._server import Card, Server, ServerPlan, Shortfall, plan_server

__all__ = ["MAX_CARDS", "Card", "Server", "ServerPlan", "ServerSpec", "Shortfall", "plan_server", "server_from"]
