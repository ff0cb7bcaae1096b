"""Ctrl-C ends a process that uses Ray within a bound (``rbln_build._interrupts.bound_exit``).

Ray's exit hook (``ray.shutdown``, run by ``atexit``) joins Ray's C++ threads; a thread that never
returns held an interrupted driver for good (seen once in a whole slow-suite run:
tests/test_ray_cluster_ops.py's Ctrl-C test had not exited 120 s after SIGINT). Here a process with the
``rbln-build`` SIGINT handler, a module named ``ray`` imported and a thread that blocks its exit (as a
held Ray thread would) gets SIGINT: it exits by the bound, with every thread's stack on stderr; without
``ray`` imported the bound is not armed (a local build exits as Python does)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHILD = """
import sys, threading, time, types
if sys.argv[1] == "ray":
    sys.modules["ray"] = types.ModuleType("ray")
from rbln_build import _interrupts
_interrupts.EXIT_BOUND_S = 1.0
_interrupts.catch()
threading.Thread(target=time.sleep, args=(float(sys.argv[2]),), name="held").start()  # not a daemon
try:
    print("ready", flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    sys.exit(130)
"""


def _interrupted(tmp_path: Path, ray: bool, held_s: float) -> tuple[int, str, float]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script), "ray" if ray else "-", str(held_s)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the interrupted process did not exit")
    return proc.returncode, err, time.monotonic() - sent


def test_a_ray_process_held_at_exit_ends_by_the_bound_and_says_where(tmp_path: Path) -> None:
    code, err, took = _interrupted(tmp_path, ray=True, held_s=30)
    assert code == 1 and took < 20, (code, took, err[-2000:])
    assert "Timeout (0:00:01)!" in err and "threading.py" in err  # every thread's stack: where it was held


def test_without_ray_the_exit_is_python_s_own(tmp_path: Path) -> None:
    code, err, took = _interrupted(tmp_path, ray=False, held_s=3)
    assert code == 130 and took >= 2.5 and "Timeout" not in err  # waited for its thread, not cut short
