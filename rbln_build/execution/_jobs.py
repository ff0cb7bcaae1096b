"""The jobs a worker runs (a process of this machine or a Ray task), and what they report.

The stages are pure functions over the Store (``_stages``), so running them elsewhere needs only the
Store's location (``StoreRef``) and the stage's inputs, both picklable:

    compile_job(ref, key, spec, backend)  -> CompileDone   one compile key (in a worker)
    cells_job(ref, cells, line_of)        -> [CellDone]    a batch of cells, in order (one round trip)

A sweep has thousands of cells that each take well under a millisecond: sent one by one, pickling
them, their futures and the pool's bookkeeping cost the scheduler more than the work. ``cell_batches``
cuts a compile key's cells into a few batches per worker (at most ``BATCH_MAX`` cells each), so a
worker still finishes its share in small steps and a killed worker loses one batch.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends import warm_up
from ..store import CellResult, CompileOutcome, Entry, Store, render_record
from ._stages import Held, compile_once, make_cell

if TYPE_CHECKING:
    from ..backends import CompileSpec
    from ..config import Cell
    from ..store import RemoteOptions

__all__ = [
    "show_cell_finished",
    "show_cells_finished",
    "StoreRef",
    "CompileDone",
    "CellDone",
    "compile_job",
    "cells_job",
    "cell_batches",
    "batch_name",
    "worker_died",
]


@dataclass(frozen=True)
class StoreRef:
    """Where a worker finds the build's Store: the local cache folder, and the remote cache if any."""

    root: str
    remote: str | None = None
    require_remote: bool = False
    owner: str = ""  # a shared cache (cache.dir): the build dir's tag (Store)
    options: RemoteOptions | None = None  # cache.* besides the URL (no secret: names of variables)

    def open(self, warn: Callable[[str], None]) -> Store:
        if self.remote is None:
            return Store(Path(self.root), warn=warn, owner=self.owner)
        from ..store import RemoteStore

        return RemoteStore(
            Path(self.root), self.remote, warn=warn, require=self.require_remote, owner=self.owner, options=self.options
        )


@dataclass(frozen=True)
class CompileDone:
    """What a worker says about one compile key (the entry itself is in the Store)."""

    key: str
    produced: str | None  # None when it failed
    fresh: bool  # compiled by this job (False: found in a cache)
    elapsed_s: float
    where: str  # host:pid of the worker
    error: str | None = None
    error_kind: str | None = None
    retry: bool = False
    warnings: tuple[str, ...] = ()
    attempt: int = 0  # a Ray task run again after its worker died: 1, 2, ... (shown with the result)
    warmup_s: float = 0.0  # of elapsed_s: importing the libraries this process had not loaded (``warm_up``)


@dataclass(frozen=True)
class CellDone:
    result: CellResult
    elapsed_s: float
    warnings: tuple[str, ...] = ()
    record: bytes | None = None  # the result's record as ``render_record`` makes it, for the scheduler to write
    line: str | None = None  # ``line_of(cell, result)`` when the job was given one (a manifest line)


def _where() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


STARTED: Any = None  # in a LocalPool worker: the pipe on which it says which compile it starts (_executors)


def _announce(key: str) -> None:
    """Tell the scheduler that this worker starts compiling ``key`` (one small write: atomic on a pipe)."""
    if STARTED is not None:
        try:
            STARTED.send_bytes(key.encode("ascii"))
        except (OSError, ValueError):
            pass  # the scheduler is gone or stopping: the display is all that misses it


def compile_job(ref: StoreRef, key: str, spec: CompileSpec, backend: str) -> CompileDone:
    """Compile one key into the Store at ``ref`` (any process). Failures are values, not raises."""
    started = time.perf_counter()
    _announce(key)
    warnings: list[str] = []
    store = ref.open(warnings.append)
    cached = store.lookup("compile", key)
    warm = 0.0 if cached is not None else warm_up(spec)
    outcome = cached if cached is not None else compile_once(store, key, spec, backend)
    took = time.perf_counter() - started
    if isinstance(outcome, CompileOutcome):
        error = (outcome.error, outcome.error_kind, outcome.retry)
        return CompileDone(key, None, False, took, _where(), *error, tuple(warnings), warmup_s=warm)
    assert isinstance(outcome, Entry)
    fresh = cached is None and outcome.made  # not made meanwhile by another build sharing the cache
    return CompileDone(key, outcome.meta["produced"], fresh, took, _where(), warnings=tuple(warnings), warmup_s=warm)


def cells_job(
    ref: StoreRef, cells: list[Cell], line_of: Callable[[Cell, CellResult], str] | None = None
) -> list[CellDone]:
    """Resolve and finalize each cell of a batch, in order, in one Store (its memos are shared by the
    batch). The results are not recorded here: the scheduler records them as batches come back
    (``Parallel``), from one process, since two workers creating files in ``cache/results/`` at once
    contend for the folder (measured: 2 processes x 5,000 records took 0.3-3.1 s of system time in
    one folder, 0.2 s in two). Each record's bytes are rendered here (``CellDone.record``), so
    the scheduler's share of a cell is writing one file; so is, with ``line_of``, the cell's line of
    the manifest (``CellDone.line``: the publish step joins them instead of rendering 10,000 lines
    after the workers are done)."""
    warnings: list[str] = []
    store = ref.open(warnings.append)
    out = []
    held: Held = {}  # each entry the batch uses is looked up (stat, verify) once, not once per cell
    for cell in cells:
        started = time.perf_counter()
        result = make_cell(store, cell, held)
        # Rendered here, so the scheduler, which writes every record of the run, only writes them.
        record = render_record(cell.cell_key, result.to_json())
        line = None if line_of is None else line_of(cell, result)
        out.append(CellDone(result, time.perf_counter() - started, tuple(warnings), record, line))
        warnings.clear()
    return out


BATCH_PER_WORKER = 4  # batches per worker at least, so the workers' shares even out
BATCH_MAX = 128  # cells per batch at most: a killed worker loses this much, the display moves this often


def cell_batches(cells: list[Cell], workers: int) -> list[list[Cell]]:
    """``cells`` in order, cut into batches for ``workers`` workers (see the module docstring)."""
    if not cells:
        return []
    size = max(1, min(BATCH_MAX, -(-len(cells) // (max(1, workers) * BATCH_PER_WORKER))))
    return [cells[i : i + size] for i in range(0, len(cells), size)]


def batch_name(cells: list[Cell]) -> str:
    """How a batch is named where a worker says what it runs (``_workers``): its first cell and size."""
    return f"cells:{cells[0].id}+{len(cells)}"


def worker_died(key: str, why: str) -> CompileDone:
    return CompileDone(
        key,
        None,
        False,
        0.0,
        "-",
        f"the worker compiling this key died ({why}); the next run retries it",
        "build_failed",
        True,
    )


def show_cell_finished(display: Any, cell: Cell, result: CellResult) -> None:
    """One finished cell on the progress display (the same line whichever executor built it)."""
    display.cell_finished(cell.id, _finished_text(cell, result), ok=result.ok or cell.expected is not None)


def show_cells_finished(display: Any, cells: list[Cell], results: list[CellResult]) -> None:
    """A batch of finished cells on the progress display, as one event (``Progress.cells_finished``)."""
    display.cells_finished(
        [
            (cell.id, _finished_text(cell, result), result.ok or cell.expected is not None)
            for cell, result in zip(cells, results, strict=True)
        ]
    )


def _finished_text(cell: Cell, result: CellResult) -> str:
    if result.ok:
        return (
            f"{result.kvcache_num_blocks} blocks (full {result.num_full_blocks}, floor {result.num_min_blocks}), "
            f"{result.produced}"
        )
    return f"FAILED ({result.error_kind})" + (" (expected)" if cell.expected is not None else "")
