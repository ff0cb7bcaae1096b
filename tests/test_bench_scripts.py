"""Every benchmark in bench/ still starts: its imports resolve and ``--help`` exits 0.

The benchmarks are not run by the suites (they take minutes and print ratios, not verdicts), so a module
they import can move without any test noticing; CI's lint then sees an unresolved import only as a sort
order. This runs each script's ``--help`` in a subprocess, which executes every top-level import.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "bench").glob("*.py"))


def test_there_are_benchmarks() -> None:
    assert len(SCRIPTS) >= 5, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bench_script_help(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout, done.stdout[:500]
