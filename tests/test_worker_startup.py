"""jobs=N on a sweep: the workers are forked when that is safe, and what they render (each cell's record
and manifest line) is what the build process would have rendered. Real CLI runs in a subprocess
(a fresh process: the test runner's own threads must not decide how workers start)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

# The real CLI (``_main.main``), with two observers: how each worker pool started, and the BuildRun
# the build published (its rows, entries and the workers' lines are then checked in this process).
BUILD = r"""
import json, sys
from rbln_build.execution import _workers
from rbln_build.pipeline import _tasks, _outputs
from rbln_build.pipeline._manifest import entry_for, render_entry, render_manifest
from rbln_build.commands import _main

methods, runs = [], []
new_pool = _workers.LocalPool._new_pool
def observed(self):
    pool = new_pool(self)
    methods.append(self.start_method)
    return pool
_workers.LocalPool._new_pool = observed
publish = _tasks.BuildRun._publish
def published(self):
    publish(self)
    runs.append(self)
_tasks.BuildRun._publish = published

sys.argv = ["rbln-build", *sys.argv[1:]]
try:
    _main.main()
except SystemExit as exc:
    code = exc.code
run = runs[-1]
rows = run.rows(run.cells)
entries = [entry_for(cell, result) for cell, result in rows]
lines = dict(run.parallel.lines)
used = _outputs.worker_lines(run.parallel, rows, entries)
first = next(cell.id for cell, _ in rows if cell.id in used)  # the first line is one that is checked
run.parallel.lines[first] = lines[first].replace('"status": "', '"status": "not ')
after_change = _outputs.worker_lines(run.parallel, rows, entries)
print(json.dumps({
    "code": code,
    "methods": methods,
    "cells": [cell.id for cell, _ in rows],
    "lines": lines,
    "used": sorted(used),
    "same_lines": all(lines[e["cell"]] == render_entry(e) for e in entries if e["cell"] in lines),
    "rendered_here": render_manifest(entries).decode(),
    "changed_line_used": len(after_change),
    # the run's entries: the ones the scheduler made as the batches came back, equal to this process's
    "entries_made_early": sum(e is run.parallel.entries.get(e["cell"]) for e in run.entries),
    "same_entries": run.entries == entries,
    # the links: made by EarlyLinks while the workers built, for the results that were published
    "linked_early": sorted(c for c, r in run.early.made.items() if r is run.parallel.cell_results.get(c)),
}))
"""


def _run(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork is chosen on Linux only")
def test_a_sweep_forks_its_workers_and_publishes_their_lines_as_this_process_renders_them(tmp_path: Path) -> None:
    build = tmp_path / "build"
    # progress=true: the display's ticker thread runs while the pool starts (it is paused for the fork)
    proc = _run(BUILD, "matrix=plans", "jobs=2", "progress=true", f"build_dir={build}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["code"] == 0, proc.stderr
    assert seen["methods"] == ["fork"]
    # every cell was built by a worker, which rendered its line; the manifest joined them
    assert sorted(seen["lines"]) == sorted(seen["cells"]) == seen["used"] and len(seen["cells"]) == 8
    assert seen["same_lines"]  # each line is render_entry of the entry this process makes
    assert (build / "manifest.json").read_text() == seen["rendered_here"]
    # a line that differs from this process's rendering where it is checked drops them all
    assert seen["changed_line_used"] == 0
    assert seen["entries_made_early"] == 8 and seen["same_entries"]
    manifest = json.loads((build / "manifest.json").read_text())["cells"]
    linked = sorted(cid for cid, entry in manifest.items() if entry["artifact"] is not None)
    assert seen["linked_early"] == linked and len(linked) == 7  # one cell fails, as the matrix expects
    assert not (build / ".publishing").exists()
    assert sorted(os.listdir(build / "artifacts")) == linked
    assert all(os.readlink(build / "artifacts" / cid).startswith("../cache/artifacts/") for cid in linked)
    # and the records the scheduler wrote from the workers' bytes verify: the full no-op path (its
    # stamp removed) reads every record and redoes none
    shutil.rmtree(build / ".noop", ignore_errors=True)
    again = subprocess.run(
        [sys.executable, "-m", "rbln_build.cli", "matrix=plans", "jobs=2", f"build_dir={build}"],
        cwd=tmp_path,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr
    summary = json.loads((build / "summary.json").read_text())
    assert (summary["compiled"], summary["finalized"], summary["skipped"]) == (0, 0, 7), summary


CHOICE = r"""
import sys, threading
from rbln_build.execution._workers import start_method
what = sys.argv[1]
if what == "thread":
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
if what == "torch":
    sys.modules["torch"] = type(sys)("torch")
print(start_method())
if what == "thread":
    stop.set()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork is chosen on Linux only")
@pytest.mark.parametrize(("state", "method"), [("alone", "fork"), ("thread", "spawn"), ("torch", "spawn")])
def test_workers_are_forked_only_by_a_process_with_one_thread_and_no_torch(
    tmp_path: Path, state: str, method: str
) -> None:
    proc = _run(CHOICE, state, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [method]


FROZEN = r"""
import gc, json, os
from rbln_build.execution._jobs import StoreRef
from rbln_build.execution._workers import LocalPool
before = gc.get_freeze_count()
pool = LocalPool(StoreRef(os.getcwd()), 2)
inherited = pool._pool.submit(gc.get_freeze_count).result()
print(json.dumps({"method": pool.start_method, "before": before, "after": gc.get_freeze_count(), "worker": inherited}))
pool.close(cancel=False)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork is chosen on Linux only")
def test_a_forked_pool_takes_the_objects_that_exist_out_of_the_collector_first(tmp_path: Path) -> None:
    """gc.freeze() before the fork (as Python's documentation advises): the workers' collections never
    walk, and so never copy, the pages of the objects they inherit, nor do this process's."""
    proc = _run(FROZEN, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["method"] == "fork" and seen["before"] == 0
    assert seen["after"] > 1000 and seen["worker"] > 1000  # (a few frozen objects die in the worker)
