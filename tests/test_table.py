"""The results a build prints: the full table up to 100 cells, above it a summary by status and
kind that names results.txt (always the full table); ``--full-table`` prints every row."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rbln_build.commands._table import FULL_TABLE_MAX, full_table, summary_table


def entry(cid: str, status: str, kind: str | None = None, produced: str | None = "plan") -> dict[str, Any]:
    ok = status in ("ok", "unexpected_success")
    return {
        "cell": cid,
        "status": status,
        "kvcache_num_blocks": 8 if ok else None,
        "num_full_blocks": 8,
        "num_min_blocks": 2,
        "memory_budget": 0.3,
        "budget_bytes": 1000 if ok else None,
        "produced": produced if ok else None,
        "error": None if ok else f"no room ({cid})",
        "error_kind": None if ok else kind,
    }


def test_the_summary_counts_by_status_and_kind_and_names_the_table() -> None:
    entries = (
        [entry(f"a.{i}", "ok") for i in range(120)]
        + [entry(f"b.{i}", "ok", produced="program") for i in range(3)]
        + [entry(f"c.{i}", "failed", "insufficient_memory") for i in range(40)]
        + [entry("d.0", "expected_failure", "insufficient_memory")]
    )
    redone = {"a.0", "a.1", "c.0"}
    text = summary_table(entries, redone, "/b/results.txt")
    lines = text.splitlines()
    assert lines[0].split() == ["status", "produced", "/", "error", "kind", "cells", "built", "cached"]
    rows = [line.split() for line in lines[2:-1]]
    assert rows == [
        ["ok", "plan", "120", "2", "118"],
        ["ok", "program", "3", "0", "3"],
        ["failed", "insufficient_memory", "40", "1", "39"],
        ["expected_failure", "insufficient_memory", "1", "0", "1"],
    ]
    assert (
        lines[-1]
        == "164 cells: the full table (164 rows) is in /b/results.txt; rbln-build --full-table prints it here."
    )
    assert "a.5" not in text  # no row per cell
    full = full_table(entries, redone)
    assert len(full.splitlines()) == 2 + len(entries) + 41  # header, rule, rows, one line per failure


@pytest.mark.integration
def test_a_sweep_above_the_threshold_prints_the_summary_and_writes_the_table(tmp_path: Path) -> None:
    budgets = "[" + ",".join(str(round(0.2 + i / 100, 2)) for i in range(26)) + "]"  # 2 x 2 x 26 = 104 cells
    args = ["matrix=plans", f"matrix.budgets={budgets}", "matrix.expect_failure=[]", f"build_dir={tmp_path / 'b'}"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", RBLN_BUILD_CACHE=str(tmp_path / "inventory"))

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "rbln_build.cli", "progress=false", *args, *extra]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)

    proc = run()
    assert proc.returncode == 1, proc.stderr  # the smallest budgets fail: failures are grouped on stderr
    assert FULL_TABLE_MAX < 104
    table = (tmp_path / "b" / "results.txt").read_text()
    assert len([line for line in table.splitlines() if line.startswith(("llama3_2_1b.", "qwen3_8b."))]) >= 104
    assert f"is in {tmp_path / 'b' / 'results.txt'}" in proc.stdout
    assert "qwen3_8b.rebel100.b0.3 " not in proc.stdout and "failed cell(s) by kind" in proc.stderr
    again = run("--full-table")
    assert again.returncode == 1, again.stderr
    table = (tmp_path / "b" / "results.txt").read_text()  # this run's table: every cell now cached
    assert again.stdout.startswith(table.rstrip("\n")) and "built" not in table.split("\n", 2)[2]
