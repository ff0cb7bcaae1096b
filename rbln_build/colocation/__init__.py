"""Every cell of a run: the matrix's, and a configured deployment's, planned from real reports.

_cells              expand_all: the union of a run's jobs' matrices and deployments; declared_cells
_colocation         a deployment's plan, and the plan as cells (``deployment_cells``, ``cells_of``)
_server_build       a deployment with a ``server`` key: its server plan, each card's models as cells
_records            the manifest's ``deployments`` records (one-card, and a server's per card)
_reports            each model's AllocationReport: the compile cache's, else the memory model's
_deploy_overrides   a suggested change as the command-line overrides that apply it
_server_cards       the deployment placed on a server's cards, and each card as a deployment of its own

The planning arithmetic is ``rbln_build.deploy``; the settings come from ``rbln_build.config``.
"""

from __future__ import annotations

from ._cells import declared_cells, expand_all
from ._colocation import Tenants, deployment_cells, plan_for, target_of
from ._deploy_overrides import overrides_for
from ._records import DeploymentRecords
from ._reports import Reports
from ._server_build import server_cells
from ._server_cards import card_devices, card_overrides, server_plan_for

__all__ = [
    "DeploymentRecords",
    "Reports",
    "Tenants",
    "card_devices",
    "card_overrides",
    "declared_cells",
    "deployment_cells",
    "expand_all",
    "overrides_for",
    "plan_for",
    "server_cells",
    "server_plan_for",
    "target_of",
]
