"""The pipeline: cells -> compile -> resolve -> finalize -> manifest, run by doit.

_stages     the pure stages (compile_once, resolve, finalize, build_cell, reusable)
_tasks      the doit wiring (one place that turns cells into doit tasks)
_startup    what a run does first: leftovers cleaned, links rolled forward, doit's state checked
_executors  compiles in worker processes (jobs=N), scheduled ahead of doit; _ray: as Ray tasks
_publish    artifact links and the manifest, written last
_manifest   manifest.json and summary.json entries
_serving    the vllm-rbln serve command of a cell
_deploy_compile  a deployment's models compiled first (rbln), so one build plans from their reports
_progress   what the terminal shows (live line or plain lines), the failure and warning summaries
_eta        the time left: compile history, this run's durations, spread over the workers
_sweep      Hydra launchers' sweep jobs (a job builds its own cells; the driver merges)
"""

from __future__ import annotations

from ._deploy_compile import compile_for_planning
from ._manifest import entry_for
from ._progress import failure_summary, warning_summary
from ._serving import command_for, with_budget
from ._startup import STATE_FILE
from ._tasks import BuildRun, dodo_namespace, doit_config

__all__ = [
    "BuildRun",
    "STATE_FILE",
    "command_for",
    "compile_for_planning",
    "dodo_namespace",
    "doit_config",
    "entry_for",
    "failure_summary",
    "warning_summary",
    "with_budget",
]
