"""Worker processes on this machine for ``Parallel`` (``_executors``): ``LocalPool`` and ``InlineCells``.

``LocalPool`` runs jobs in ``jobs`` spawned processes (``ProcessPoolExecutor``). Each job tells the
pool, through a queue set up when the worker starts, which item it is running (a compile key or a
cell id) and in which process. When the OS kills a worker (the OOM killer, a segfault), Python's
pool breaks: every job still running or queued fails with ``BrokenProcessPool`` and the other workers
are stopped. ``dead_items`` then names what the killed process was running (its exit status is a
signal: the workers the pool stopped itself exit with status 1, quietly), and ``restart`` gives a
fresh pool so the scheduler can resubmit everything else: only the killed worker's item fails
(retryable), as a killed Ray task does once its retries are used up.

A worker turns SIGTERM and SIGINT into ``KeyboardInterrupt`` while it runs a job, so the Store's
``finally`` blocks remove its temporary folders, and then exits without a traceback (the scheduler
stopping its workers is not an error to print); an idle worker exits at once.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

from ._jobs import CellDone, CompileDone, StoreRef, cell_job, compile_job

if TYPE_CHECKING:
    from ..backends import CompileSpec
    from ..config import Cell

__all__ = ["LocalPool", "InlineCells"]

_started: Any = None  # in a worker: the queue on which each job says what it runs
_busy = False  # in a worker: a job is running (a signal unwinds it, then the worker exits)


def _interrupt(*_: Any) -> None:
    # Unwind once: a second signal (Ctrl-C reaches the worker, then the scheduler's SIGTERM) must not
    # break into the `finally` blocks that are removing the Store's temporary folders.
    signal.signal(signal.SIGINT, _ignore)  # not SIG_IGN: a signal already pending would raise OSError
    signal.signal(signal.SIGTERM, _ignore)
    if not _busy:
        os._exit(1)  # idle: nothing to clean up, nothing to print
    raise KeyboardInterrupt


def _ignore(*_: Any) -> None:
    pass


def _worker_init(parent: int, threads: int, started: Any = None) -> None:
    global _started
    _started = started
    # N workers share the cores: torch's intra-op pool (sized from OMP_NUM_THREADS when it is first
    # used) gets cores / N threads per worker, as Ray does for its tasks; a user's setting stands.
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
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


def _tracked(item: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` in a worker, having said which item this process runs. Stopped by a
    signal, the job's ``finally`` blocks run and the worker exits with status 1, quietly."""
    global _busy
    if _started is not None:
        _started.put((os.getpid(), item))
    _busy = True
    try:
        return fn(*args)
    except KeyboardInterrupt:
        os._exit(1)
    finally:
        _busy = False


class LocalPool:
    """``jobs`` worker processes on this machine (spawned), for compiles and cells alike."""

    def __init__(self, ref: StoreRef, jobs: int) -> None:
        self.ref = ref
        self.jobs = jobs
        self.description = f"{jobs} worker process(es)"
        self._context = multiprocessing.get_context("spawn")
        self._started: Any = None
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        self._started = self._context.Queue()
        self._running: dict[int, str] = {}  # worker pid -> the item it last started
        return ProcessPoolExecutor(
            max_workers=self.jobs,
            mp_context=self._context,
            initializer=_worker_init,
            initargs=(os.getpid(), max(1, (os.cpu_count() or 1) // self.jobs), self._started),
        )

    def submit_compile(self, key: str, spec: CompileSpec, backend: str) -> Future[CompileDone]:
        return self._pool.submit(_tracked, f"compile:{key}", compile_job, self.ref, key, spec, backend)

    def submit_cell(self, cell: Cell) -> Future[CellDone]:
        return self._pool.submit(_tracked, f"cell:{cell.id}", cell_job, self.ref, cell)

    def dead_items(self) -> set[str]:
        """After the pool broke: the items ("compile:<key>", "cell:<id>") that workers killed by a
        signal were running. Empty when no worker died that way (then nothing is to blame)."""
        while True:
            try:
                pid, item = self._started.get(timeout=0.5)
            except (queue.Empty, OSError, ValueError, EOFError):
                break
            self._running[pid] = item
        processes = dict(getattr(self._pool, "_processes", None) or {})  # no public handle on the workers
        for p in processes.values():
            p.join(5)
        return {
            self._running[pid]
            for pid, p in processes.items()
            if p.exitcode is not None and p.exitcode < 0 and pid in self._running
        }

    def restart(self) -> None:
        """A fresh pool after the old one broke (its workers are stopped)."""
        self.close(cancel=True)
        self._pool = self._new_pool()

    def close(self, cancel: bool) -> None:
        if not cancel:
            self._pool.shutdown(wait=True)
            self._started.close()
            return
        workers = list((getattr(self._pool, "_processes", None) or {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for p in workers:
            if p.is_alive():
                p.terminate()
        deadline = time.monotonic() + 5  # a worker stuck in C code for longer is killed outright
        for p in workers:
            p.join(max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(5)
        self._started.close()


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
