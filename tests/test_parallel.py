"""jobs=N: compile keys and cells in worker processes give the manifest and artifacts of jobs=1, print
whole progress lines, stop cleanly on Ctrl-C, and the next run resumes. Real CLI runs (subprocesses)
over matrix=plans (4 compile keys, 8 cells)."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from test_cli import PLANS, check_ok, manifest, rbln, summary

SLOW = "matrix.backend=rbln_test_plugins:SlowBackend"
LINE = re.compile(
    r"\[compile \d+/\d+\] \S+(?: \w+)* for RBLN-C[AR] x\d+ \(\S+\): (plan|program) (\(worker \S+:\d+\)|from the cache) in \d+\.\d+s"
    r"|\[compile \d+/\d+\] .*: FAILED after \d+\.\d+s: .+"
    r"|\[cell \d+/\d+\] \S+: (\d+ blocks \(full \d+, floor \d+\), (plan|program)|FAILED \(\w+\)( \(expected\))?)"
    r"|\[progress \d+%\] compiles \d+/\d+ \| cells \d+/\d+ \| .*"
    r"|\(test backend\) compile of \S+ sleeping \S+s before commit"
)


def tree(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (following the artifacts/ links into the cache)."""
    out = {}
    for folder, _, files in os.walk(root, followlinks=True):
        for name in files:
            path = Path(folder) / name
            out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.mark.slow  # over 10 s: the default suite keeps under 10 minutes on 2 cores
def test_jobs_2_builds_what_jobs_1_builds_byte_for_byte(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    check_ok(rbln([*PLANS, "jobs=1", f"build_dir={one}"], cwd=tmp_path))
    proc = rbln([*PLANS, "jobs=2", f"build_dir={two}"], cwd=tmp_path)
    check_ok(proc)
    assert (one / "manifest.json").read_bytes() == (two / "manifest.json").read_bytes()
    assert tree(one / "artifacts") == tree(two / "artifacts") and len(tree(two / "artifacts")) >= 8
    assert summary(two)["compiled"] == summary(one)["compiled"] == 4
    lines = proc.stderr.splitlines()
    assert [ln for ln in lines if not LINE.fullmatch(ln)] == []  # whole lines only, none interleaved
    finished = [ln for ln in lines if ln.startswith("[compile") and ": plan (" in ln]  # each names its worker
    assert sorted(ln.split("]")[0] for ln in finished) == [f"[compile {i}/4" for i in range(1, 5)]
    again = rbln([*PLANS, "jobs=2", f"build_dir={two}"], cwd=tmp_path)  # a no-op starts no worker
    check_ok(again)
    assert "[compile" not in again.stderr and summary(two)["skipped"] == 7


def test_ctrl_c_stops_the_workers_keeps_whole_entries_and_the_next_run_resumes(tmp_path: Path) -> None:
    build = tmp_path / "build"
    # The RBLN-CR compiles linger; the RBLN-CA ones finish. Ctrl-C comes once both CA keys are in.
    env = dict(os.environ, HF_HUB_OFFLINE="1", RBLN_TEST_BACKEND_SLEEP_S="300", RBLN_TEST_SLEEP_FAMILY="RBLN-CR")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rbln_build.cli", *PLANS, SLOW, "jobs=2", f"build_dir={build}"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # A terminal's foreground job takes Ctrl-C. A process started in the background of a
        # non-interactive shell (`cmd &`, as a CI script may be) inherits SIGINT ignored, and Python
        # keeps it ignored: the build then never saw the signal (the hang seen under `.ci/run &`).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # its own process group, as a terminal's job is
    assert proc.stderr is not None
    seen: list[str] = []
    deadline = time.time() + 300
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if sum("RBLN-CA" in ln and ": plan (" in ln for ln in seen) == 2 and sum("sleeping" in ln for ln in seen) >= 1:
            break
    workers = psutil.Process(proc.pid).children(recursive=True)
    assert len(workers) >= 2, "".join(seen)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # never leave the build running into the next tests
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"still running 120 s after SIGINT; its stderr:\n{err[-3000:]}")
    assert proc.returncode == 130, err
    assert "interrupted; finished compiles and cells are kept, the next run resumes" in err
    assert "Traceback" not in err
    _, alive = psutil.wait_procs(workers, timeout=15)
    assert not [(w.pid, w.cmdline()) for w in alive]
    assert not list(build.rglob(".tmp-*"))  # the workers removed their unfinished entries
    assert not (build / "manifest.json").exists()
    done = [p.name for p in (build / "cache" / "compile").iterdir()]
    assert len(done) == 2  # the two RBLN-CA keys, whole
    again = rbln([*PLANS, SLOW, "jobs=2", f"build_dir={build}"], cwd=tmp_path)
    check_ok(again)
    assert summary(build)["compiled"] == 2  # only the interrupted keys
    assert sorted(p.name for p in (build / "cache" / "compile").iterdir()) == sorted(
        {*done, *(e["compile_key"] for e in manifest(build)["cells"].values())}
    )


@pytest.mark.parametrize(
    ("override", "says"),
    [
        pytest.param("jobs=0", "jobs: expected a positive number of worker processes", id="jobs-zero"),
        pytest.param("executor.max_retries=-1", "executor.max_retries: expected 0 or more", id="retries"),
        pytest.param("cache.remote=ftp://host/x", "cache.remote: expected an fsspec URL", id="remote-scheme"),
        pytest.param("cache.remote=s3://key:secret@bucket/x", "cache.remote: the URL holds credentials", id="creds"),
    ],
)
def test_scale_settings_are_checked(tmp_path: Path, override: str, says: str) -> None:
    proc = rbln([*PLANS, override, f"build_dir={tmp_path / 'build'}"], cwd=tmp_path)
    check_ok(proc, 2)
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "build").exists()


def test_compiles_up_to_date_count_as_done_beside_new_compiles_of_the_same_models(tmp_path: Path) -> None:
    """jobs=2, a batch size added to a built matrix: the four new compiles (the same models and
    targets as the four up-to-date ones, other options) are named with their option, and the count
    line reaches N/N (an up-to-date compile was taken for one the workers had shown, by its label)."""
    build = [*PLANS, "budget=0.5", "jobs=2", f"build_dir={tmp_path / 'build'}"]
    check_ok(rbln([*build, "matrix.batch_sizes=[8]"], cwd=tmp_path))
    proc = rbln([*build, "matrix.batch_sizes=[8,4]"], cwd=tmp_path)
    check_ok(proc)
    lines = proc.stderr.splitlines()
    new = sorted(ln.split("] ")[1].split(":")[0] for ln in lines if ln.startswith("[compile "))
    assert new == [
        f"{model} bs4 for {family} (plan)"  # recipes without weights: plans
        for model in ("llama3_2_1b", "qwen3_8b")
        for family in ("RBLN-CA x4", "RBLN-CR x1")
    ], lines
    assert re.fullmatch(r"\[progress 100%\] compiles 8/8 \| cells 8/8 \| \d+s elapsed", lines[-1]), lines
    assert sum(ln.startswith("[progress ") and "cells 8/8" in ln for ln in lines) == 1, lines


def test_cells_go_to_the_workers_in_order_in_batches() -> None:
    from rbln_build.execution._jobs import BATCH_MAX, BATCH_PER_WORKER, batch_name, cell_batches

    cells = [object() for _ in range(1000)]
    for workers in (1, 2, 8):
        batches = cell_batches(cells, workers)  # type: ignore[arg-type]
        assert [c for b in batches for c in b] == cells  # every cell once, in order
        assert all(1 <= len(b) <= BATCH_MAX for b in batches)
        assert len(batches) >= min(len(cells), workers * BATCH_PER_WORKER)
    assert [len(b) for b in cell_batches(cells[:3], 2)] == [1, 1, 1]  # fewer cells than slots: one each
    assert cell_batches([], 2) == []

    class Named:
        id = "m.d.b0.5"

    assert batch_name([Named(), Named()]) == "cells:m.d.b0.5+2"  # type: ignore[list-item]


def test_a_cancelled_pool_is_wound_down_before_the_interpreter_exits(tmp_path: Path) -> None:
    # After Ctrl-C the pool's manager thread closes its wake-up pipe while Python's exit hook writes to
    # it, unless close() waits for that thread: "OSError: Bad file descriptor" on the terminal (seen in
    # CI; a bare ProcessPoolExecutor shut down this way printed it in 6 of 60 runs, 0 of 60 with the wait).
    from rbln_build.execution._jobs import StoreRef
    from rbln_build.execution._workers import LocalPool

    pool = LocalPool(StoreRef(root=str(tmp_path)), 2)
    running = [pool._pool.submit(time.sleep, 60) for _ in range(3)]
    deadline = time.monotonic() + 60
    while not any(f.running() for f in running) and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = list(pool._pool._processes.values())  # type: ignore[union-attr]
    manager, wakeup = pool._pool._executor_manager_thread, pool._pool._executor_manager_thread_wakeup
    assert manager is not None and manager.is_alive()
    pool.close(cancel=True)
    assert not manager.is_alive()
    assert wakeup._closed  # the exit hook's write is then a no-op
    assert not any(p.is_alive() for p in workers)


INTERRUPTED_IN_A_FINALIZER = """
import gc, os, signal, sys, time, weakref
from rbln_build.commands import _main
from rbln_build.execution import _workers

marker, finalizer, process = sys.argv[1:]

def interrupted(*_):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.5)

class Finalized:
    def __del__(self):  # the signal arrives while the collector runs this (as regex's __del__ was, in CI)
        interrupted()

class Referent:
    pass

def job():
    try:
        if finalizer == "__del__":
            Finalized()
        else:  # a weakref callback: no __del__ on the stack, Python swallows the exception all the same
            kept = [weakref.ref(Referent(), interrupted)]
        gc.collect()
        time.sleep(20)  # the job must not run on: it was told to stop
        open(marker + ".ran-on", "w").close()
    finally:
        open(marker, "w").close()  # the job's clean-up (the Store's finally blocks) still runs

def main():  # in place of the command line's: Ctrl-C exits 130, as run_command makes it
    try:
        job()
    except KeyboardInterrupt:
        sys.exit(130)

if process == "worker":
    _workers._worker_init(os.getppid(), 1)
    _workers._tracked("compile:k", job)  # a worker stopped by a signal exits with status 1
else:  # the rbln-build process itself
    _main.main = main
    _main.entry()
"""


@pytest.mark.parametrize("process", ["worker", "main"])
@pytest.mark.parametrize("finalizer", ["__del__", "weakref callback"])
def test_ctrl_c_inside_a_finalizer_still_stops_quietly(tmp_path: Path, finalizer: str, process: str) -> None:
    # A KeyboardInterrupt raised inside __del__ is swallowed by Python ("Exception ignored in ...",
    # a traceback on the terminal) and the job runs on. Seen in CI after a Ctrl-C: the signal reached a
    # worker while the garbage collector ran a finalizer in the regex module. The rbln-build process
    # itself is open to the same.
    marker = tmp_path / "cleaned-up"
    proc = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_IN_A_FINALIZER, str(marker), finalizer, process],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stderr) == (1 if process == "worker" else 130, ""), proc.stderr
    # the job did not run on (its 20 s sleep would end in .ran-on); no wall-clock bound: a loaded
    # machine takes seconds to start the interpreter
    assert marker.exists() and not Path(f"{marker}.ran-on").exists()


def test_a_broken_pool_hands_new_work_back_as_broken_for_the_scheduler_to_resubmit(tmp_path: Path) -> None:
    """The probe's exit 3 (issue 36): a worker killed while the scheduler hands out a finished
    compile's cells; the driver submitted to the broken pool and ``submit`` raised BrokenProcessPool
    out of the run. Now the refused item is a future failed with it, which ``Parallel._resubmit``
    restarts the pool for and submits again, as it does for the items the broken pool held."""
    from concurrent.futures import wait
    from concurrent.futures.process import BrokenProcessPool

    from rbln_build.execution import StoreRef
    from rbln_build.execution._workers import LocalPool

    pool = LocalPool(StoreRef(str(tmp_path / "cache")), 1)
    try:
        killed = pool._pool.submit(os._exit, 1)  # the worker dies as a killed one does: no reply
        wait([killed], timeout=60)
        assert isinstance(killed.exception(), BrokenProcessPool)
        refused = pool.submit_compile("0" * 64, None, "torch")  # type: ignore[arg-type]
        assert refused.done() and isinstance(refused.exception(), BrokenProcessPool)
        pool.restart()
        assert pool._pool.submit(os.getpid).result(timeout=60) > 0  # the fresh pool takes work again
    finally:
        pool.close(cancel=True)
