"""Co-location: plan several models that share one NPU target (pure; nothing heavy imported).

    _inputs    the target, the tenants (a model and its report), reservations, and what a tenant
               occupies per (node, chiplet) at every count (the estimator's arithmetic)
    _search    the exact search: max-min by binary search, then branch and bound
    _cpsat     steps 2-4 of the objective as a constraint program (OR-Tools CP-SAT, optional)
    _planner   one mode's plan (budget: the smallest budget per planned count; blocks: explicit counts)
    _modeplan  that plan: each model's count, budget and usage, the objective, the conflicts
    _conflict  an infeasible plan's every conflicting model, each with its reason
    suggest/   changes that make it fit, each verified by planning again (single, then pairs)
    _plan      both modes, and for an infeasible plan its conflicts and suggestions
    _render    the plan and the per-chiplet table as text and as JSON
    server/    a server: each model placed on one of several cards of the target (CP-SAT)

It imports the estimator only; ``rbln_build.colocation`` gives it reports from the compile cache or
the memory model, and turns a plan into cells.
"""

from __future__ import annotations

from ._conflict import Conflict
from ._inputs import Demand, Grid, Margin, Margins, Reservation, Target, Tenant, Traffic
from ._modeplan import Assignment, ModePlan, Objective, Proof
from ._plan import MEASURE, PLAN_LIMIT, DeploymentPlan, Reshape, Retarget, Suggestion, plan_deployment
from ._planner import (
    ACCOUNTING,
    BLOCKS,
    BUDGET,
    CP_SAT,
    DEFAULT_SOLVER,
    MODES,
    NODE_LIMIT,
    OBJECTIVE,
    SEARCH,
    SOLVERS,
    Problem,
    Solver,
    budget_value,
)
from ._render import mib, plan_json, render_chiplets, render_plan
from ._traffic_conf import bounded_count, bytes_from, margin_from, traffic_from

__all__ = [
    "bounded_count",
    "traffic_from",
    "ACCOUNTING",
    "Assignment",
    "BLOCKS",
    "BUDGET",
    "Conflict",
    "Demand",
    "DeploymentPlan",
    "Grid",
    "MEASURE",
    "PLAN_LIMIT",
    "Margin",
    "Margins",
    "MODES",
    "ModePlan",
    "NODE_LIMIT",
    "CP_SAT",
    "DEFAULT_SOLVER",
    "SEARCH",
    "SOLVERS",
    "Solver",
    "Proof",
    "OBJECTIVE",
    "Objective",
    "Problem",
    "Reservation",
    "Reshape",
    "Retarget",
    "Suggestion",
    "Target",
    "Tenant",
    "Traffic",
    "budget_value",
    "bytes_from",
    "margin_from",
    "mib",
    "plan_deployment",
    "plan_json",
    "render_chiplets",
    "render_plan",
]
