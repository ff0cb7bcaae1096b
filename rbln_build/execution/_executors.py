"""Running the build stages concurrently: worker processes on this machine, or Ray tasks.

The stages are pure functions over the Store (``_stages``), so running them elsewhere needs only the
Store's location (``StoreRef``) and the stage's inputs, both picklable:

    compile_job(ref, key, spec, backend)  -> CompileDone   one compile key (in a worker)
    cells_job(ref, cells, line_of)        -> [CellDone]    resolve + finalize a batch of cells (in a worker)

``Parallel`` is the scheduler a build uses when it has more than one worker (``jobs``) or a Ray
executor. It works ahead of doit: it submits every compile key that is not done, and submits the
cells of a key, in batches (``cell_batches``), the moment its compile is in the Store (cells whose
compile was already there start at once). It prints one line per finished compile and cell, from its one thread, so lines never
interleave. doit then runs its tasks as usual and their actions take the results instead of
redoing them (``_tasks``): doit keeps its up-to-date state, the Store keeps the truth.

Worker processes are forked when this process has a single thread and has not imported torch
(Linux), and spawned otherwise (``_workers.start_method``): a forked child of a process that runs
other threads may deadlock on a lock one of them held. On Ctrl-C the
scheduler cancels what has not started, stops the workers (SIGTERM, which a worker turns into
KeyboardInterrupt so the Store's temporary folders are removed), and re-raises: a compile is either
in the Store whole or not at all, and the next run resumes from what is there.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..store import CellResult, CompileOutcome, Store
from ._jobs import (
    CellDone,
    CompileDone,
    StoreRef,
    batch_name,
    cell_batches,
    cells_job,
    compile_job,
    show_cells_finished,
    worker_died,
)
from ._recording import record_batch
from ._stages import compile_done, reusable
from ._workers import InlineCells, LocalPool

if TYPE_CHECKING:
    from ..backends import CompileSpec
    from ..config import Cell, Scale
    from ._ledger import Ledger

_MAX_SUBMITS = 3  # an item whose pool broke under it this often fails (retryable), even if no worker is to blame

__all__ = [
    "StoreRef",
    "CompileDone",
    "CellDone",
    "Compiler",
    "LocalPool",
    "Parallel",
    "compile_job",
    "cells_job",
    "worker_died",
]


# -- where the work runs ---------------------------------------------------------------------------


class Compiler(Protocol):
    """Runs compile keys somewhere and hands back futures."""

    description: str

    def submit_compile(self, key: str, spec: CompileSpec, backend: str) -> Future[CompileDone]: ...

    def close(self, cancel: bool) -> None: ...


def _broke(fut: Future[Any]) -> bool:
    """Whether ``fut`` failed because its process pool broke (a worker was killed)."""
    return fut.done() and not fut.cancelled() and isinstance(fut.exception(), BrokenProcessPool)


# -- the scheduler ---------------------------------------------------------------------------------


@dataclass
class Parallel:
    """Compile keys and cells of one run, concurrently (see the module docstring)."""

    store: Store
    ref: StoreRef
    scale: Scale
    compiles: dict[str, Cell]  # compile key -> a cell that needs it (its spec and backend)
    cells: list[Cell]
    display: Any  # the run's _progress.Progress: every line goes through it, from this one thread
    label: Callable[[Cell], str]  # a compile as the display names it
    warn: Callable[[str], None]  # the run's warnings (shown, and kept for summary.json)
    compile_results: dict[str, CompileDone] = field(default_factory=dict)
    cell_results: dict[str, CellResult] = field(default_factory=dict)
    cell_seconds: dict[str, float] = field(default_factory=dict)  # cell id -> its job's seconds (summary.json)
    shown: set[str] = field(default_factory=set)  # compile keys and cell ids shown by this scheduler
    ledger: Ledger | None = None  # the run's single pass over the Store (None: this reads the Store itself)
    # (cell, result) -> the cell's manifest line, run by the workers (``cells_job``); ``lines`` keeps
    # them, cell id -> line, for the results that were recorded as the workers made them
    line_of: Callable[[Cell, CellResult], str] | None = None
    lines: dict[str, str] = field(default_factory=dict)
    # (cell, result) -> the cell's manifest entry, made here as each batch comes back (the workers
    # are the busy side then); ``entries`` keeps them, cell id -> entry (``_outputs.made_entries``)
    entry_of: Callable[[Cell, CellResult], dict[str, Any]] | None = None
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    # (cells, results) of each batch as it is recorded: the publish step's links and the results
    # indexes, made meanwhile
    recorded: Callable[[list[Cell], list[CellResult]], None] | None = None
    _stale_keys: set[str] | None = None

    def run(self) -> None:
        if self.ledger is not None:
            keys = [k for k in self.compiles if not self.ledger.compile_done(k)]
            todo = self.ledger.todo(self.cells)
        else:
            keys = [k for k in self.compiles if not compile_done(self.store, k)]
            todo = [c for c in self.cells if reusable(self.store, c) is None]
        workers = self.scale.workers(max(len(keys), 1))
        if (not keys and not todo) or (self.scale.executor == "local" and workers <= 1):
            return  # nothing to do, or one worker: doit runs the stages in this process, in order
        with self.display.without_threads():  # so the workers can be forked (``_workers.start_method``)
            compiler, cell_runner = self._runners(workers, bool(keys))
        waiting: dict[str, list[Cell]] = {k: [] for k in keys}
        pending: dict[Future[Any], tuple[str, Any]] = {}
        self.display.use_workers(workers)
        try:
            for key in keys:
                cell = self.compiles[key]
                pending[compiler.submit_compile(key, cell.spec, cell.backend)] = ("compile", key)
                if not hasattr(compiler, "started"):  # Ray: queued counts as started
                    self.display.compile_started(self.label(cell), key)
            ready: list[Cell] = []
            for cell in todo:
                if cell.compile_key in waiting:
                    waiting[cell.compile_key].append(cell)
                else:
                    ready.append(cell)
            for batch in cell_batches(ready, workers):
                pending[cell_runner.submit_cells(batch, self.line_of)] = ("cells", batch)
            tries: dict[str, int] = {}
            land = getattr(compiler, "land", lambda: None)  # Ray: its results are landed here, in this thread
            while pending:
                land()
                done, _ = wait(list(pending), timeout=0.1, return_when=FIRST_COMPLETED)
                for key in getattr(compiler, "started", list)():  # before their results: starts come first
                    if key in self.compiles and key not in self.compile_results:
                        self.display.compile_started(self.label(self.compiles[key]), key)
                if any(_broke(f) for f in done) and isinstance(cell_runner, LocalPool):  # compiles too, if local
                    done = self._resubmit(cell_runner, pending, done, tries)
                for fut in done:
                    what, item = pending.pop(fut)
                    if what == "compile":
                        self._compiled(item, fut)
                        for batch in cell_batches(waiting.pop(item, []), workers):
                            pending[cell_runner.submit_cells(batch, self.line_of)] = ("cells", batch)
                    else:
                        self._finished(item, fut)
        except BaseException:
            compiler.close(cancel=True)
            if cell_runner is not compiler:
                cell_runner.close(cancel=True)
            # The workers are gone; what a killed one was writing is a .tmp-* folder of our own (the
            # build lock is ours), never a half entry. Remove it now rather than at the next run.
            self.store.clean_temporaries()
            raise
        compiler.close(cancel=False)
        if cell_runner is not compiler:
            cell_runner.close(cancel=False)

    def _resubmit(
        self,
        pool: LocalPool,
        pending: dict[Future[Any], tuple[str, Any]],
        done: set[Future[Any]],
        tries: dict[str, int],
    ) -> set[Future[Any]]:
        """The local pool broke (a worker was killed by the OS). What the killed worker ran fails as
        a retryable failure (its future is returned with ``done``); everything else the broken pool
        held (the other workers' jobs, the queued ones) is resubmitted to a fresh pool, at most
        ``_MAX_SUBMITS`` times an item. Returns the futures to report now."""
        dead = pool.dead_items()
        pool.restart()
        report = {f for f in done if not _broke(f)}
        for fut in [f for f in pending if _broke(f)]:
            what, item = pending[fut]
            name = f"compile:{item}" if what == "compile" else batch_name(item)
            tries[name] = tries.get(name, 1) + 1
            if name in dead or tries[name] > _MAX_SUBMITS:
                report.add(fut)
                continue
            del pending[fut]
            if what == "compile":
                cell = self.compiles[item]
                assert cell.spec is not None
                pending[pool.submit_compile(item, cell.spec, cell.backend)] = (what, item)
            else:
                pending[pool.submit_cells(item, self.line_of)] = (what, item)
        return report

    def _runners(self, workers: int, compiles: bool) -> tuple[Any, Any]:
        if self.scale.executor == "ray" and compiles:  # cells alone never start or join a cluster
            from ._ray import RayCompiler

            compiler = RayCompiler(self.ref, self.scale)
            jobs = self.scale.jobs or 1
            cells = LocalPool(self.ref, jobs) if jobs > 1 else InlineCells(self.ref)
            return compiler, cells
        if self.scale.executor == "ray" and (self.scale.jobs or 1) <= 1:
            inline = InlineCells(self.ref)
            return inline, inline
        pool = LocalPool(self.ref, workers)
        return pool, pool

    def _compiled(self, key: str, fut: Future[CompileDone]) -> None:
        try:
            done = fut.result()
        except BrokenProcessPool as exc:
            done = worker_died(key, str(exc) or "the process pool broke")
        except Exception as exc:  # a task that failed for good (Ray: retries used up)
            done = worker_died(key, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip())
        for message in done.warnings:
            self.warn(message)
        if done.error is not None and self.store.load_record("failures", key) is None:
            outcome = CompileOutcome(
                compile_key=key, error=done.error, error_kind=done.error_kind or "build_failed", retry=done.retry
            )
            try:
                self.store.save_record("failures", key, outcome.to_json())
            except OSError:
                pass
        self.compile_results[key] = done
        cell = self.compiles[key]
        label = self.label(cell)
        self.shown.add(key)
        if done.error is not None:
            self.display.compile_finished(label, done.elapsed_s, False, done.error, key, warmup_s=done.warmup_s)
        else:
            retried = f", after {done.attempt} retr{'y' if done.attempt == 1 else 'ies'}" if done.attempt else ""
            where = f"(worker {done.where}{retried})" if done.fresh else "from the cache"
            self.display.compile_finished(
                label, done.elapsed_s, True, f"{done.produced} {where}", key, warmup_s=done.warmup_s
            )

    def _stale(self) -> set[str]:
        """Cell keys that had a record file when the run began (the ledger's): a cell redone now has
        its record packed, and that file removed (``record_batch``)."""
        if self._stale_keys is None:
            prints = self.ledger.fingerprints if self.ledger is not None else {}
            self._stale_keys = {key for key, stat in prints.items() if isinstance(stat, list)}
        return self._stale_keys

    def _finished(self, cells: list[Cell], fut: Future[list[CellDone]]) -> None:
        try:
            finished = fut.result()
        except Exception as exc:  # the worker died: its cells are not recorded; the next run redoes them
            why = f"the worker building this cell died ({type(exc).__name__}); the next run retries it"
            results = [CellResult(c.cell_key, c.compile_key).failed(why, "build_failed", True) for c in cells]
        else:
            for done in finished:
                for message in done.warnings:
                    self.warn(message)
            # one process writes (cells_job): the batch's records, one pack per compile key
            results = record_batch(
                self.store, cells, [d.result for d in finished], [d.record for d in finished], self._stale()
            )
            for cell, done, result in zip(cells, finished, results, strict=True):
                self.cell_seconds[cell.id] = done.elapsed_s
                if done.line is not None and result is done.result:  # not made a failure by its record
                    self.lines[cell.id] = done.line
        show_cells_finished(self.display, cells, results)
        if self.recorded is not None:
            self.recorded(cells, results)
        for cell, result in zip(cells, results, strict=True):
            self.cell_results[cell.id] = result
            self.shown.add(cell.id)
            if self.entry_of is not None:
                self.entries[cell.id] = self.entry_of(cell, result)
