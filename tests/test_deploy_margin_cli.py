"""Margins and the solver through the real CLI: the plan's JSON, one error line for a bad margin (exit 2),
and a plan the search finishes never imports OR-Tools (the optional solver extra)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from memory_helpers import _CACHE, inventory
from test_cli import check_ok, rbln

MiB = 2**20


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    for name in ("tiny_llama", "tiny_qwen3"):
        inventory(name)
    shutil.copytree(_CACHE, tmp_path / "inv" / "inventory")
    return {"RBLN_BUILD_CACHE": str(tmp_path / "inv")}


def test_plan_json_carries_the_margin(tmp_path: Path, env: dict[str, str]) -> None:
    args = ["plan", "deployment=tiny_pair", "deployment.margin=4MB", "--json", f"build_dir={tmp_path / 'build'}"]
    # tiny_pair leaves 226 MiB: (6, 16) without a margin (tests/test_deploy_cli.py); 4 MiB held back
    # leave 222, where (8, 12) is the optimum (tests/test_deploy_margin.py)
    proc = rbln(args, cwd=tmp_path, env=env)
    check_ok(proc)
    data = json.loads(proc.stdout)
    assert data["margin"] == {"deployment": {"bytes": 4 * MiB, "fraction": 0.0}, "devices": {}}
    for plan in data["plans"].values():
        assert {n: m["kvcache_num_blocks"] for n, m in plan["models"].items()} == {"tiny_llama": 8, "tiny_qwen3": 12}
        assert plan["per_chiplet"]["margin"] == [[4 * MiB]] and plan["per_chiplet"]["headroom"] == [[0]]
        assert plan["solver"] == {"solver": "search", "optimal": True, "gap": 0.0, "note": "proven optimal"}


def test_a_bad_margin_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    proc = rbln(["plan", "deployment=tiny_pair", "deployment.margin=2.0"], cwd=tmp_path)
    check_ok(proc, 2)
    assert "deployment.margin: a fraction of a chiplet must be at least 0 and below 1" in proc.stderr
    assert "Traceback" not in proc.stderr


def _imports_ortools(tmp_path: Path, env: dict[str, str], *overrides: str) -> bool:
    code = (
        "import sys\nfrom rbln_build.cli import main\n"
        f"sys.argv = ['rbln-build', 'plan', 'deployment=tiny_pair', 'build_dir={tmp_path / 'build'}', *{list(overrides)!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('ORTOOLS', 'ortools' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, **env}, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return "ORTOOLS True" in proc.stdout


def test_a_plan_the_search_finishes_does_not_import_ortools(tmp_path: Path, env: dict[str, str]) -> None:
    pytest.importorskip("ortools")
    assert not _imports_ortools(tmp_path, env)  # auto: the search finishes
    assert _imports_ortools(tmp_path, env, "deployment.solver.method=cp-sat")  # the check can see it


@pytest.mark.slow  # two torch exports (~10 s)
def test_a_built_deployment_records_and_checks_its_margin(tmp_path: Path, env: dict[str, str]) -> None:
    # tiny_pair with a 4 MiB margin builds (8, 12) (see above); the record's totals come from the built
    # reports at the built counts, and its headroom is what they leave once the margin is held
    build = tmp_path / "build"
    check_ok(rbln(["deployment=tiny_pair", "deployment.margin=4MB", f"build_dir={build}"], cwd=tmp_path, env=env))
    record = json.loads((build / "manifest.json").read_text())["deployments"]["tiny_pair"]
    assert {n: v["kvcache_num_blocks"] for n, v in record["models"].items()} == {"tiny_llama": 8, "tiny_qwen3": 12}
    per = record["per_chiplet"]
    assert per["margin"] == [[4 * MiB]] and per["headroom"] == [[per["available"] - per["total"][0][0] - 4 * MiB]]
    assert per["headroom"] == [[0]] and record["fits"] and record["problems"] == []
    # the tiny recipes are synthetic (no hub model): their torch cells get no serve command, and say why
    # (the pinned VLLM_RBLN_USE_VLLM_MODEL=0 of every command is checked in tests/test_serving.py)
    proc = rbln(["serve-command", "deployment=tiny_pair", "--json", f"build_dir={build}"], cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "synthetic recipe (seeded weights)" in proc.stderr, proc.stderr
