"""Hydra launchers that run the sweep's jobs in other processes: each joblib job builds its cells
under the build lock, the parent merges, and the manifest equals the basic launcher's byte for byte
(the basic launcher's sweep over the budgets equals matrix=plans: test_cli.test_multirun_equals_the_matrix).
A launcher whose jobs never report back is a clear error, not an empty manifest."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli import check_ok, plans_build, rbln, summary  # noqa: F401 (a fixture)

SWEEP = ["-m", "matrix=plans", "budget=0.3,0.5"]


@pytest.mark.slow  # over 10 s: the default suite keeps under 10 minutes on 2 cores
def test_joblib_launcher_builds_every_job_and_merges_the_basic_launchers_manifest(
    plans_build: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    out = tmp_path / "build"
    proc = rbln([*SWEEP, "hydra/launcher=joblib", f"build_dir={out}"], cwd=tmp_path)
    check_ok(proc)
    assert (out / "manifest.json").read_bytes() == (plans_build / "manifest.json").read_bytes()
    assert proc.stderr.count("| cells 4/4 |") == 2  # each job built its own four cells (its last count line)
    assert proc.stderr.count(": plan in") == 4  # and each compile key was compiled once
    assert summary(out)["cells"] == 8 and not list(out.rglob(".tmp-*"))
    assert summary(out)["compiled"] == 4  # the jobs' compiles, counted once (the merge compiled nothing)
    assert "8 cells: 4 compiled" in proc.stdout


@pytest.mark.slow
def test_joblib_launcher_over_the_shards_builds_each_job_s_shard_and_merges(
    plans_build: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """``-m shard=1/2,2/2`` with joblib: each job builds only its shard's keys (before, a job built the
    whole matrix), the parent runs the shards again (nothing to compile) and the merge."""
    out = tmp_path / "build"
    remote = f"cache.remote=file://{tmp_path / 'remote'}"
    proc = rbln(["-m", "matrix=plans", "shard=1/2,2/2", "hydra/launcher=joblib", f"build_dir={out}", remote],
                cwd=tmp_path)  # fmt: skip
    check_ok(proc)
    assert proc.stderr.count(": plan in") == 4  # each key compiled once, by its shard's job
    assert "| cells 4/4 |" in proc.stderr and "| cells 8/8 |" not in proc.stderr  # no job built the whole matrix
    assert proc.stdout.count("4 cells: 2 compiled") == 2 and "merge of 2 shard(s): 8 cells" in proc.stdout
    assert (out / "manifest.json").read_bytes() == (plans_build / "manifest.json").read_bytes()


def test_a_launcher_whose_jobs_never_report_back_is_an_error(tmp_path: Path) -> None:
    # tests/plugins/hydra_plugins/rbln_test_launcher: reports every job done and runs none here.
    proc = rbln([*SWEEP, "hydra/launcher=elsewhere", f"build_dir={tmp_path / 'build'}"], cwd=tmp_path)
    check_ok(proc, 2)
    assert "hydra/launcher=elsewhere: the sweep's jobs ran outside this process and none reported back" in proc.stderr
    assert not (tmp_path / "build" / "manifest.json").exists() and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_joblib_job_with_a_bad_value_fails_the_sweep_with_the_jobs_error(tmp_path: Path) -> None:
    proc = rbln(
        ["-m", "matrix=plans", "budget=0.3,bogus", "hydra/launcher=joblib", f"build_dir={tmp_path / 'b'}"], cwd=tmp_path
    )
    check_ok(proc, 2)
    assert "rbln-build: sweep job 1 (matrix=plans budget=bogus" in proc.stderr
    assert "memory_budget 'bogus' is not a valid byte size" in proc.stderr
    assert not (tmp_path / "b" / "manifest.json").exists()
