"""jobs=N: the workers are forked when that is safe (one thread, no torch), spawned otherwise. A fresh
process each (the test runner's own threads must not decide how workers start)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _run(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )


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
