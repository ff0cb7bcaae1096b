"""Running the build stages concurrently: worker processes on this machine, or Ray tasks.

The stages are pure functions over the Store (``_stages``), so running them elsewhere needs only the
Store's location (``StoreRef``) and the stage's inputs, both picklable:

    compile_job(ref, key, spec, backend)  -> CompileDone   one compile key (in a worker)
    cell_job(ref, cell)                   -> CellDone      resolve + finalize one cell (in a worker)

``Parallel`` is the scheduler a build uses when it has more than one worker (``jobs``) or a Ray
executor. It works ahead of doit: it submits every compile key that is not done, and submits the
cells of a key the moment its compile is in the Store (cells whose compile was already there start
at once). It prints one line per finished compile and cell, from its one thread, so lines never
interleave. doit then runs its tasks as usual and their actions take the results instead of
redoing them (``_tasks``): doit keeps its up-to-date state, the Store keeps the truth.

Worker processes are started with ``spawn``: a forked child of a process that has imported torch
(or started threads) may deadlock, and spawn behaves the same on every platform. On Ctrl-C the
scheduler cancels what has not started, stops the workers (SIGTERM, which a worker turns into
KeyboardInterrupt so the Store's temporary folders are removed), and re-raises: a compile is either
in the Store whole or not at all, and the next run resumes from what is there.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..store import CellResult, CompileOutcome, Store
from ._jobs import CellDone, CompileDone, StoreRef, cell_job, compile_job, worker_died
from ._stages import compile_done, reusable

if TYPE_CHECKING:
    from ..backends import CompileSpec
    from ..config import Cell, Scale

__all__ = [
    "StoreRef",
    "CompileDone",
    "CellDone",
    "Compiler",
    "LocalPool",
    "Parallel",
    "compile_job",
    "cell_job",
    "worker_died",
]


# -- where the work runs ---------------------------------------------------------------------------


class Compiler(Protocol):
    """Runs compile keys somewhere and hands back futures."""

    description: str

    def submit_compile(self, key: str, spec: CompileSpec, backend: str) -> Future[CompileDone]: ...

    def close(self, cancel: bool) -> None: ...


def _interrupt(*_: Any) -> None:
    # Unwind once: a second signal (Ctrl-C reaches the worker, then the scheduler's SIGTERM) must not
    # break into the `finally` blocks that are removing the Store's temporary folders.
    signal.signal(signal.SIGINT, _ignore)  # not SIG_IGN: a signal already pending would raise OSError
    signal.signal(signal.SIGTERM, _ignore)
    raise KeyboardInterrupt


def _ignore(*_: Any) -> None:
    pass


def _worker_init(parent: int, threads: int) -> None:
    # N workers share the cores: torch's intra-op pool (sized from OMP_NUM_THREADS when it is first
    # used) gets cores / N threads per worker, as Ray does for its tasks; a user's setting stands.
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    # SIGTERM (the scheduler stopping its workers) unwinds like Ctrl-C, so `finally` blocks remove
    # the Store's temporary folders.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    # A build killed outright (SIGKILL) takes its workers with it, as a one-process build would die:
    # what they leave is a .tmp-* folder that the next run removes. Linux: the kernel does it.
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        import threading

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent:
        os._exit(1)


class LocalPool:
    """``jobs`` worker processes on this machine (spawned), for compiles and cells alike."""

    def __init__(self, ref: StoreRef, jobs: int) -> None:
        self.ref = ref
        self.jobs = jobs
        self.description = f"{jobs} worker process(es)"
        self._pool = ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_init,
            initargs=(os.getpid(), max(1, (os.cpu_count() or 1) // jobs)),
        )

    def submit_compile(self, key: str, spec: CompileSpec, backend: str) -> Future[CompileDone]:
        return self._pool.submit(compile_job, self.ref, key, spec, backend)

    def submit_cell(self, cell: Cell) -> Future[CellDone]:
        return self._pool.submit(cell_job, self.ref, cell)

    def close(self, cancel: bool) -> None:
        if not cancel:
            self._pool.shutdown(wait=True)
            return
        processes = list(getattr(self._pool, "_processes", {}).values())  # no public handle on the workers
        self._pool.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            if p.is_alive():
                p.terminate()
        deadline = time.monotonic() + 5  # a worker stuck in C code for longer is killed outright
        for p in processes:
            p.join(max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(5)


class InlineCells:
    """Cells in this process (a Ray build with ``jobs=1``): a finished future per call."""

    def __init__(self, ref: StoreRef) -> None:
        self.ref = ref
        self.description = "this process"

    def submit_cell(self, cell: Cell) -> Future[CellDone]:
        fut: Future[CellDone] = Future()
        fut.set_result(cell_job(self.ref, cell))
        return fut

    def close(self, cancel: bool) -> None:
        pass


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
    shown: set[str] = field(default_factory=set)  # compile labels and cell ids shown by this scheduler

    def run(self) -> None:
        keys = [k for k in self.compiles if not compile_done(self.store, k)]
        todo = [c for c in self.cells if reusable(self.store, c) is None]
        workers = self.scale.workers(max(len(keys), 1))
        if (not keys and not todo) or (self.scale.executor == "local" and workers <= 1):
            return  # nothing to do, or one worker: doit runs the stages in this process, in order
        compiler, cell_runner = self._runners(workers, bool(keys))
        waiting: dict[str, list[Cell]] = {k: [] for k in keys}
        pending: dict[Future[Any], tuple[str, Any]] = {}
        try:
            for key in keys:
                cell = self.compiles[key]
                pending[compiler.submit_compile(key, cell.spec, cell.backend)] = ("compile", key)
                self.display.compile_started(self.label(cell))  # queued on the workers
            for cell in todo:
                if cell.compile_key in waiting:
                    waiting[cell.compile_key].append(cell)
                else:
                    pending[cell_runner.submit_cell(cell)] = ("cell", cell)
            while pending:
                done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for fut in done:
                    what, item = pending.pop(fut)
                    if what == "compile":
                        self._compiled(item, fut)
                        for cell in waiting.pop(item, []):
                            pending[cell_runner.submit_cell(cell)] = ("cell", cell)
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
        self.shown.add(label)
        if done.error is not None:
            self.display.compile_finished(label, done.elapsed_s, False, done.error)
        else:
            where = f"({done.where})" if done.fresh else "from the cache"
            self.display.compile_finished(label, done.elapsed_s, True, f"{done.produced} {where}")

    def _finished(self, cell: Cell, fut: Future[CellDone]) -> None:
        try:
            done = fut.result()
            result = done.result
            for message in done.warnings:
                self.warn(message)
        except Exception as exc:  # the worker died: the cell is not recorded; the next run redoes it
            result = CellResult(cell.cell_key, cell.compile_key).failed(
                f"the worker building this cell died ({type(exc).__name__}); the next run retries it",
                "build_failed",
                True,
            )
        self.cell_results[cell.id] = result
        if result.ok:
            what = (
                f"{result.kvcache_num_blocks} blocks (full {result.num_full_blocks}, floor {result.num_min_blocks}), "
                f"{result.produced}"
            )
        else:
            what = f"FAILED ({result.error_kind})" + (" (expected)" if cell.expected is not None else "")
        self.shown.add(cell.id)
        self.display.cell_finished(cell.id, what, ok=result.ok or cell.expected is not None)
