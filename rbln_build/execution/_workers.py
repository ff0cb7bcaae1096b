"""Worker processes on this machine for ``Parallel`` (``_executors``): ``LocalPool`` and ``InlineCells``.

``LocalPool`` runs jobs in ``jobs`` worker processes (``ProcessPoolExecutor``), forked when that is safe
and spawned otherwise (``start_method``). A pipe set up when
each worker starts carries two kinds of short messages back: a compile job says which key it starts
(``_jobs.compile_job``; the progress display shows it), and every job says which item it runs in
which process (``_tracked``). When the OS kills a worker (the OOM killer, a segfault), Python's pool
breaks: every job still running or queued fails with ``BrokenProcessPool`` and the other workers
are stopped. ``dead_items`` then names what the killed process was running (its exit status is a
signal; the workers the pool stopped itself exit with status 1, quietly), and ``restart`` gives a
fresh pool so the scheduler can resubmit everything else: only the killed worker's item fails
(retryable), as a killed Ray task does once its retries are used up.

A worker turns SIGTERM and SIGINT into ``KeyboardInterrupt`` while it runs a job, so the Store's
``finally`` blocks remove its temporary folders, and then exits without a traceback (the scheduler
stopping its workers is not an error to print); an idle worker exits at once. A signal that lands in
a finalizer (where Python would swallow the exception and print it) unwinds a moment later instead. A worker that ends
normally skips the interpreter's teardown (``_exit_now``).
"""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.util
import os
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from types import FrameType
from typing import TYPE_CHECKING, Any

from .. import _interrupts
from . import _jobs
from ._jobs import CellDone, CompileDone, StoreRef, batch_name, cells_job, compile_job

if TYPE_CHECKING:
    from ..backends import CompileSpec
    from ..config import Cell

__all__ = ["LocalPool", "InlineCells"]

_busy = False  # in a worker: a job is running (a signal unwinds it, then the worker exits)
_STOPPED = False  # in a worker: stopped by a signal (its exit status says so)
_RUNNING = b"@"  # a pipe message "@<pid> <item>": this process runs that item (else: a compile key started)


def _interrupt(_signum: int, frame: FrameType | None) -> None:
    global _STOPPED
    _STOPPED = True
    # Unwind once: a second signal (Ctrl-C reaches the worker, then the scheduler's SIGTERM) must not
    # break into the `finally` blocks that are removing the Store's temporary folders.
    signal.signal(signal.SIGINT, _ignore)  # not SIG_IGN: a signal already pending would raise OSError
    signal.signal(signal.SIGTERM, _ignore)
    _unwind(frame)


def _unwind(frame: FrameType | None) -> None:
    if not _busy:
        _exit_now()  # idle: nothing to clean up, nothing to print
    _interrupts.unwind(frame, _unwind)  # not inside a finalizer, where Python would swallow it


def _ignore(*_: Any) -> None:
    pass


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def _exit_now() -> None:
    # The last thing a worker does (multiprocessing's exit hooks, lowest priority): exit without the
    # interpreter's teardown, whose collection of torch's objects took 10-16 s per worker while the
    # pool shut down. Its results are sent (synchronously) and its files closed by now.
    _flush_streams()
    os._exit(1 if _STOPPED else 0)


def _worker_init(parent: int, threads: int, started: Any = None) -> None:
    _jobs.STARTED = started  # compile_job says on it which key it starts; _tracked what it runs
    multiprocessing.util.Finalize(None, _exit_now, exitpriority=-100)
    # N workers share the cores: torch's intra-op pool (sized from OMP_NUM_THREADS when it is first
    # used) gets cores / N threads per worker, as Ray does for its tasks; a user's setting stands.
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    _interrupts.retry_swallowed(_unwind)
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
    if _jobs.STARTED is not None:
        try:
            _jobs.STARTED.send_bytes(_RUNNING + f"{os.getpid()} {item}".encode())
        except (OSError, ValueError):
            pass
    _busy = True
    try:
        return fn(*args)
    except KeyboardInterrupt:
        _exit_now()
        raise  # not reached
    finally:
        _busy = False


def _threads() -> int | None:
    """How many threads this process runs, as the kernel counts them (the ones Python did not start,
    such as an OpenMP pool, included); None where that cannot be read."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def start_method() -> str:
    """``fork`` when this process has one thread and has not imported torch (Linux); else ``spawn``.

    A forked worker starts in milliseconds with the parent's modules already imported; a spawned one
    starts a new interpreter and imports rbln-build again (measured on a 10,008-cell sweep with 2
    workers: their user CPU 1.5-1.6 s spawned, 1.0-1.2 s forked; the first compile done 0.18-0.23 s
    after the pool started, against 0.03-0.04 s).
    But a fork copies only the thread that calls it: a lock another thread held stays locked in the
    child for ever, which is how forked children of threaded processes deadlock. So fork is used only
    when no other thread exists to hold one (the kernel's count, so threads that C libraries started
    count too), and never after torch (its thread pools start lazily). Elsewhere: spawn."""
    if not sys.platform.startswith("linux") or "torch" in sys.modules or _threads() != 1:
        return "spawn"
    return "fork"


class LocalPool:
    """``jobs`` worker processes on this machine, for compiles and cells alike."""

    def __init__(self, ref: StoreRef, jobs: int) -> None:
        self.ref = ref
        self.jobs = jobs
        self.description = f"{jobs} worker process(es)"
        self.start_method = "spawn"  # how the current pool's workers started (``_new_pool``)
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        self.start_method = start_method()  # again for each pool: a restart may find threads running
        self._context = multiprocessing.get_context(self.start_method)
        if self.start_method == "fork":
            _flush_streams()  # a child must not inherit output to write again
            # What Python's documentation advises before a fork: the objects that exist now (a sweep's
            # cells, its configuration, the modules) leave the cyclic collector's generations, so the
            # workers' collections never touch (and copy) the pages they inherit, and this process's
            # own full collections skip them for the rest of the run. Measured on a fresh 10,008-cell
            # sweep with 2 workers, 10 builds of each alternated: the workers' phase took 1.40-1.81 s
            # (median 1.59 s) against 1.44-1.88 s (median 1.73 s) without.
            gc.freeze()
        self._started, started = self._context.Pipe(duplex=False)  # workers' messages (module doc)
        self._running: dict[int, str] = {}  # worker pid -> the item it last started
        self._announced: list[str] = []
        pool = ProcessPoolExecutor(
            max_workers=self.jobs,
            mp_context=self._context,
            initializer=_worker_init,
            initargs=(os.getpid(), max(1, (os.cpu_count() or 1) // self.jobs), started),
        )
        if self.start_method == "fork":
            # The pool forks all its workers at its first submit, before it starts its own thread:
            # now, while the caller knows that no other thread runs (``Progress.without_threads``).
            pool.submit(os.getpid)
        return pool

    def _drain(self, wait_s: float = 0.0) -> None:
        try:
            while self._started.poll(wait_s):
                message = self._started.recv_bytes()
                if message.startswith(_RUNNING):
                    pid, _, item = message[1:].decode().partition(" ")
                    self._running[int(pid)] = item
                else:
                    self._announced.append(message.decode("ascii"))
        except (OSError, EOFError, ValueError):
            pass

    def started(self) -> list[str]:
        """The compile keys that workers started since the last call."""
        self._drain()
        keys, self._announced = self._announced, []
        return keys

    def submit_compile(self, key: str, spec: CompileSpec, backend: str) -> Future[CompileDone]:
        return self._submit(_tracked, f"compile:{key}", compile_job, self.ref, key, spec, backend)

    def submit_cells(self, cells: list[Cell], line_of: Callable[..., str] | None = None) -> Future[list[CellDone]]:
        return self._submit(_tracked, batch_name(cells), cells_job, self.ref, cells, line_of)

    def _submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """``fn(*args)`` on the pool. A pool that broke since the scheduler last looked (a worker
        killed while a finished compile's cells are handed out) refuses new work: the item comes back
        as a future failed with ``BrokenProcessPool``, so the scheduler restarts the pool and submits
        it again (``Parallel._resubmit``), as it does for the items the broken pool held."""
        try:
            return self._pool.submit(fn, *args)
        except BrokenProcessPool as exc:
            refused: Future[Any] = Future()
            refused.set_exception(exc)
            return refused

    def dead_items(self) -> set[str]:
        """After the pool broke: the items ("compile:<key>", "cell:<id>", ``batch_name``) that workers killed by a
        signal were running. Empty when no worker died that way (then nothing is to blame)."""
        processes = dict(getattr(self._pool, "_processes", None) or {})  # no public handle on the workers
        for p in processes.values():
            p.join(5)
        self._drain(0.2)
        return {
            self._running[pid]
            for pid, p in processes.items()
            if p.exitcode is not None and p.exitcode < 0 and pid in self._running
        }

    def restart(self) -> None:
        """A fresh pool after the old one broke (its workers are stopped); compile starts not yet
        shown are kept for ``started``."""
        announced = self.started()
        self.close(cancel=True)
        self._pool = self._new_pool()
        self._announced = announced

    def close(self, cancel: bool) -> None:
        if not cancel:
            self._pool.shutdown(wait=True)
            return
        workers = list((getattr(self._pool, "_processes", None) or {}).values())
        manager = getattr(self._pool, "_executor_manager_thread", None)  # no public handle; shutdown drops it
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
        # Wait for the pool's manager thread to see its workers gone and close its wake-up pipe. Left
        # running, it closes that pipe while the interpreter's exit hook writes to it (Python 3.11 takes
        # no lock there): "Exception ignored ... OSError: Bad file descriptor" after a Ctrl-C.
        if manager is not None:
            manager.join(10)


class InlineCells:
    """Cells in this process (a Ray build with ``jobs=1``): a finished future per call."""

    def __init__(self, ref: StoreRef) -> None:
        self.ref = ref
        self.description = "this process"

    def submit_cells(self, cells: list[Cell], line_of: Callable[..., str] | None = None) -> Future[list[CellDone]]:
        fut: Future[list[CellDone]] = Future()
        fut.set_result(cells_job(self.ref, cells, line_of))
        return fut

    def close(self, cancel: bool) -> None:
        pass
