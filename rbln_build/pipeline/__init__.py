"""The pipeline: cells -> compile -> resolve -> finalize -> manifest, run by doit.

_tasks      BuildRun: one run over a list of cells (the ledger, the executors, doit, the outputs)
_doit       the doit side: its configuration, the tasks' names and up-to-date checks
_startup    what a run does first: leftovers cleaned, links rolled forward, doit's state checked
_publish    artifact links and the manifest, written last
_manifest   manifest.json and summary.json entries
_serving    the vllm-rbln serve command of a cell
_deploy_compile  a deployment's models compiled first (rbln), so one build plans from their reports
_sweep      Hydra launchers' sweep jobs (a job builds its own cells; the driver merges)

The stages, the ledger and the executors are ``rbln_build.execution``; what the terminal shows is
``rbln_build.progress``.
"""

from __future__ import annotations

from ..backends import check_compiled_devices, compiled_num_devices
from ..execution import Ledger, artifact_key_of, entry_state, read_record, survey
from ..progress import failure_summary, warning_summary
from . import _sweep as sweep_jobs  # a namespace: sweep_jobs.begin(), .in_worker(), .run_job(), .finish()
from ._deploy_compile import compile_for_planning
from ._dodo import dodo_namespace
from ._doit import display_label, doit_config
from ._links import ours
from ._manifest import entry_for, render_manifest
from ._publish import MANIFEST_FILE, write_summary
from ._serving import check_serving, command_for, with_budget
from ._startup import STATE_FILE, scope_inventory_cache
from ._tasks import BuildRun

__all__ = [
    "display_label",
    "render_manifest",
    "MANIFEST_FILE",
    "write_summary",
    "sweep_jobs",
    "BuildRun",
    "Ledger",
    "artifact_key_of",
    "STATE_FILE",
    "check_compiled_devices",
    "check_serving",
    "command_for",
    "compiled_num_devices",
    "compile_for_planning",
    "dodo_namespace",
    "doit_config",
    "entry_for",
    "entry_state",
    "failure_summary",
    "ours",
    "read_record",
    "scope_inventory_cache",
    "survey",
    "warning_summary",
    "with_budget",
]
