"""How a cell's work runs: the pure stages, the run's view of what is done, and the executors.

_stages     the pure stages over the Store (compile_once, resolve, finalize, build_cell, reusable)
_ledger     the single pass over the Store that decides what is up to date
_index      a cell's record read without changing the Store; each compile key's results index
_jobs       the picklable jobs a worker runs (a process here or a Ray task) and what they report
_executors  Parallel: compiles (and cells) scheduled ahead of doit, on the chosen executor
_workers    worker processes on this machine (LocalPool) and in-process cells (InlineCells)
_ray        compile keys as Ray tasks;  _ray_setup: a private cluster's temp dir
_cluster/   Ray across machines: token auth from the cluster, credentials Ray never logs, scratch folders
_task_inputs     what a Ray compile task reads, carried by content (no driver paths)
_input_digests   the digests a compile key holds for a recipe and a checkpoint, recomputed from bytes

The pipeline (``rbln_build.pipeline``) wires these into doit; nothing here knows doit.
"""

from __future__ import annotations

from ._executors import Parallel, StoreRef
from ._index import IndexWhileBuilding, index_cells, read_record
from ._jobs import show_cell_finished
from ._ledger import Ledger, entry_state, survey
from ._stages import LOG_DIR, artifact_key_of, build_cell, compile_done, compile_once, describe

__all__ = [
    "LOG_DIR",
    "Ledger",
    "Parallel",
    "StoreRef",
    "artifact_key_of",
    "build_cell",
    "compile_done",
    "compile_once",
    "describe",
    "entry_state",
    "index_cells",
    "IndexWhileBuilding",
    "read_record",
    "show_cell_finished",
    "survey",
]
