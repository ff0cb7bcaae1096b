"""The planner's terms: its modes, solvers and their settings, the objective and the accounting it
states, and how a planned budget is written (``_planner`` re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ACCOUNTING",
    "AUTO",
    "BLOCKS",
    "BUDGET",
    "CP_SAT",
    "DEFAULT_SOLVER",
    "MODES",
    "MiB",
    "NODE_LIMIT",
    "OBJECTIVE",
    "SEARCH",
    "SOLVERS",
    "Solver",
    "budget_value",
]

BUDGET, BLOCKS = "budget", "blocks"
MODES = (BUDGET, BLOCKS)
NODE_LIMIT = 2_000_000
MiB = 2**20
AUTO, SEARCH, CP_SAT = "auto", "search", "cp-sat"
SOLVERS = (AUTO, SEARCH, CP_SAT)


@dataclass(frozen=True)
class Solver:
    """Which exact method solves steps 2-4 of the objective (step 1 is always the binary search).

    * ``search``: the hand-written branch and bound (``_search``), up to ``NODE_LIMIT`` nodes;
    * ``cp-sat``: OR-Tools CP-SAT (``_cpsat``, the ``solver`` extra), within ``time_limit`` seconds;
    * ``auto`` (the default): the search, and past ``auto_nodes`` nodes CP-SAT when it is installed.
    Both are exact, so where both finish their plans are the same."""

    method: str = AUTO
    time_limit: float = 60.0
    auto_nodes: int = 20_000
    workers: int = 1


DEFAULT_SOLVER = Solver()

OBJECTIVE = (
    "maximize the smallest share of its full pool (kvcache_num_blocks / full pool) that any planned model "
    "gets; then the weighted sum of shares; then the total number of blocks; ties go to the models listed first"
)


ACCOUNTING = (
    "what each model occupies on every chiplet at its count (non-KV bytes plus its KV pool), plus the "
    "reservations, must fit each chiplet; a memory_budget only steers optimum-rbln's block estimate at "
    'compile time and is not reserved at run time (docs/colocation.md, "What a memory_budget is")'
)


def budget_value(nbytes: int) -> object:
    """The ``memory_budget`` a planned budget is built with: ``"<N>MB"`` when it is a whole number of
    MiB (it resolves to exactly ``nbytes``; binary units), else the int byte count."""
    return f"{nbytes // MiB}MB" if nbytes % MiB == 0 else nbytes
