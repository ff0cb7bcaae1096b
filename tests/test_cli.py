"""Integration: the real `rbln-build` CLI as a subprocess, in temporary build directories.

Most tests use `matrix=plans` (the large recipes resolve plans: no torch export, seconds per build),
which exercises config, keys, doit, cache, estimator, finalize and manifest. The real exports of the
tiny recipes (and the bare default matrix) are in the `slow` tests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
PLANS = ["matrix=plans"]
PLAN_CELLS = 8
pytestmark = pytest.mark.integration  # every test here runs the real CLI as a subprocess
SLOW = "matrix.backend=rbln_test_plugins:SlowBackend"  # tests/plugins: lingers before committing a compile


def rbln(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600, modules: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The real CLI; with ``modules``, through tests/plugins/rbln_cli_imports, which lists there the
    torch/transformers modules the run imported."""
    runner = ["-m", "rbln_build.cli"] if modules is None else ["-m", "rbln_cli_imports", str(modules)]
    return subprocess.run(
        [sys.executable, *runner, *args],
        cwd=cwd,
        env=dict(os.environ, HF_HUB_OFFLINE="1", **(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def popen(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rbln_build.cli", *args],
        cwd=cwd,
        env=dict(os.environ, HF_HUB_OFFLINE="1", **(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def summary(build: Path) -> dict[str, Any]:
    return json.loads((build / "summary.json").read_text())  # type: ignore[no-any-return]


def manifest(build: Path) -> dict[str, Any]:
    return json.loads((build / "manifest.json").read_text())  # type: ignore[no-any-return]


def check_ok(proc: subprocess.CompletedProcess[str], code: int = 0) -> None:
    assert proc.returncode == code, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


@pytest.fixture(scope="module")
def plans_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One clean build of matrix=plans; tests copy it rather than rebuild it."""
    work = tmp_path_factory.mktemp("plans")
    proc = rbln([*PLANS, f"build_dir={work / 'build'}"], cwd=work)
    check_ok(proc)
    return work / "build"


def copy_build(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "build"
    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_fresh_build(plans_build: Path) -> None:
    s = summary(plans_build)
    assert (s["cells"], s["compiled"], s["finalized"], s["skipped"]) == (PLAN_CELLS, 4, 7, 0)
    assert (s["failed"], s["expected_failure_cells"]) == (0, ["qwen3_8b.atom_max_x4.b0.3"])
    m = manifest(plans_build)
    assert m["schema_version"] == 1 and len(m["cells"]) == PLAN_CELLS
    reference = m["cells"]["qwen3_8b.rebel100.b0.3"]  # the specification's figure: 1 x RBLN-CR at 0.3
    assert (reference["kvcache_num_blocks"], reference["num_full_blocks"], reference["num_min_blocks"]) == (21, 40, 9)
    assert m["cells"]["qwen3_8b.atom_max_x4.b0.5"]["kvcache_num_blocks"] == 14  # 4 x RBLN-CA at 0.5
    for e in m["cells"].values():
        if e["status"] != "ok":
            continue
        assert e["produced"] == "plan"
        art = plans_build / e["artifact"]["path"]
        assert not (art / "rbln_config.json").exists()  # a plan is nothing optimum-rbln could load
        config = json.loads((art / "rbln-build.json").read_text())
        assert config["artifact"] == "plan" and config["programs"] == {}
        assert config["kvcache_num_blocks"] == e["kvcache_num_blocks"] > 0
        assert config["npu"] == e["inputs"]["npu"]
    assert not (plans_build / "artifacts" / "qwen3_8b.atom_max_x4.b0.3").exists()


def test_noop_rebuild_redoes_nothing_and_imports_no_torch(plans_build: Path, tmp_path: Path) -> None:
    build = copy_build(plans_build, tmp_path)
    before = (build / "manifest.json").read_bytes()
    modules = tmp_path / "modules.txt"
    proc = rbln([*PLANS, f"build_dir={build}"], cwd=tmp_path, modules=modules)
    check_ok(proc)
    s = summary(build)
    assert (s["compiled"], s["finalized"], s["skipped"], s["redone_cells"]) == (0, 0, 7, [])
    assert modules.read_text() == "", f"heavy modules imported on the no-op path: {modules.read_text()}"
    assert (build / "manifest.json").read_bytes() == before
    assert "[compile" not in proc.stderr and "[cell" not in proc.stderr
    for cid in manifest(build)["cells"]:
        assert cid in proc.stdout  # the results table lists every cell


def test_budget_only_change_compiles_nothing(plans_build: Path, tmp_path: Path) -> None:
    build = copy_build(plans_build, tmp_path)
    proc = rbln([*PLANS, "matrix.budgets=[0.3,0.6]", f"build_dir={build}"], cwd=tmp_path)
    check_ok(proc)
    s = summary(build)
    assert s["compiled"] == 0
    assert s["redone_cells"] == sorted(
        f"{m}.{d}.b0.6" for m in ("llama3_2_1b", "qwen3_8b") for d in ("atom_max_x4", "rebel100")
    )
    old, new = manifest(plans_build)["cells"], manifest(build)["cells"]
    for cid, e in new.items():
        if cid.endswith(".b0.3"):
            assert e == old[cid]


def test_corrupted_cache_entries_are_detected_and_rebuilt(plans_build: Path, tmp_path: Path) -> None:
    build = copy_build(plans_build, tmp_path)
    before = manifest(build)
    cell = before["cells"]["qwen3_8b.rebel100.b0.3"]
    report = build / "cache" / "compile" / cell["compile_key"] / "files" / "report.json"
    report.write_text(report.read_text().replace("1", "2", 1))
    artifact = (build / cell["artifact"]["path"] / "rbln-build.json").resolve()
    artifact.write_text(artifact.read_text().replace('"kvcache_num_blocks": 21', '"kvcache_num_blocks": 40'))
    proc = rbln([*PLANS, f"build_dir={build}"], cwd=tmp_path)
    check_ok(proc)
    assert proc.stderr.count("is corrupt") == 2, proc.stderr
    s = summary(build)
    assert s["compiled"] == 1 and "qwen3_8b.rebel100.b0.3" in s["redone_cells"]
    assert manifest(build) == before
    config = json.loads((build / cell["artifact"]["path"] / "rbln-build.json").read_text())
    assert config["kvcache_num_blocks"] == 21


def test_editing_a_recipe_recompiles_only_that_recipe(plans_build: Path, tmp_path: Path) -> None:
    build = copy_build(plans_build, tmp_path)
    recipes = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", recipes)
    check_ok(rbln([*PLANS, f"build_dir={build}", f"recipes_dir={recipes}"], cwd=tmp_path))
    assert summary(build)["redone_cells"] == []  # keys hash recipe content, not its path
    with open(recipes / "qwen3_8b" / "recipe.yaml", "a") as f:
        f.write("# edited\n")
    check_ok(rbln([*PLANS, f"build_dir={build}", f"recipes_dir={recipes}"], cwd=tmp_path))
    s = summary(build)
    assert s["compiled"] == 2
    assert s["redone_cells"] == sorted(c for c in manifest(build)["cells"] if c.startswith("qwen3_8b."))


INSUFFICIENT = re.compile(
    r"^Insufficient memory for the required KV cache: only \d+ blocks can be allocated, but at least 9 blocks "
    r"are required\. Consider reducing `max_seq_len` or `batch_size` \(currently 8\) to lower the memory requirement\.$"
)


def test_infeasible_cell_fails_alone_with_the_exact_error(plans_build: Path, tmp_path: Path) -> None:
    build = copy_build(plans_build, tmp_path)
    proc = rbln([*PLANS, "matrix.expect_failure=[]", f"build_dir={build}"], cwd=tmp_path)
    check_ok(proc, 1)
    cells = manifest(build)["cells"]
    bad = cells["qwen3_8b.atom_max_x4.b0.3"]
    assert bad["status"] == "failed" and bad["error_kind"] == "insufficient_memory"
    assert INSUFFICIENT.match(bad["error"]), bad["error"]
    assert bad["artifact"] is None and bad["kvcache_num_blocks"] is None and bad["num_min_blocks"] == 9
    assert all(e["status"] == "ok" for cid, e in cells.items() if cid != "qwen3_8b.atom_max_x4.b0.3")
    assert "qwen3_8b.atom_max_x4.b0.3" in proc.stderr
    assert summary(build)["failed_cells"] == ["qwen3_8b.atom_max_x4.b0.3"]
    # The error itself is stored: the next run still fails, without redoing anything.
    again = rbln([*PLANS, "matrix.expect_failure=[]", f"build_dir={build}"], cwd=tmp_path)
    check_ok(again, 1)
    assert summary(build)["redone_cells"] == []


@pytest.mark.parametrize(
    ("override", "says"),
    [
        pytest.param("matrix.budgetz=[0.3]", "matrix.budgetz", id="misspelt-key"),
        pytest.param("matrix.batch_sizes=[a]", "matrix.batch_sizes[0]", id="wrong-type"),
        pytest.param("device=atom", "device=atom: no such option; did you mean device=atom_max", id="unknown-device"),
        pytest.param("matrix.models=[qwen3_8b,qwen3_9b]", "matrix.models[1]", id="unknown-model"),
        pytest.param("+matrix.budgetz=[1]", "matrix.budgetz", id="appended-unknown-key"),
        pytest.param("matrix.include=[{budgts:[1]}]", "matrix.include[0].budgts", id="include-misspelt-key"),
        pytest.param("budget=abc", "budget: memory_budget 'abc' is not a valid byte size", id="malformed-budget"),
    ],
)
def test_malformed_config_is_a_clear_error_and_writes_nothing(tmp_path: Path, override: str, says: str) -> None:
    proc = rbln([*PLANS, override], cwd=tmp_path)
    assert proc.returncode == 2
    assert says in proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_malformed_multirun_writes_nothing(tmp_path: Path) -> None:
    proc = rbln(["-m", *PLANS, "budget=0.3,0.5", "matrix.batch_sizes=[a]"], cwd=tmp_path)
    assert proc.returncode == 2 and "matrix.batch_sizes[0]" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_multirun_equals_the_matrix(plans_build: Path, tmp_path: Path) -> None:
    proc = rbln(["-m", *PLANS, "budget=0.3,0.5", "device=atom_max_x4,rebel100"], cwd=tmp_path)
    check_ok(proc)
    build = tmp_path / "build"
    assert manifest(build) == manifest(plans_build)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build"]  # no timestamped folders
    assert sorted(p.name for p in (build / "hydra").iterdir()) == ["multirun.yaml"]


def test_two_clean_builds_write_identical_manifests(plans_build: Path, tmp_path: Path) -> None:
    check_ok(rbln([*PLANS], cwd=tmp_path))  # build_dir defaults to ./build
    assert (tmp_path / "build" / "manifest.json").read_bytes() == (plans_build / "manifest.json").read_bytes()


@pytest.mark.slow  # over 10 s: the default suite keeps under 10 minutes on 2 cores
def test_sigkill_mid_compile_leaves_no_partial_artifact(plans_build: Path, tmp_path: Path) -> None:
    build = tmp_path / "build"
    proc = popen([*PLANS, SLOW, f"build_dir={build}"], cwd=tmp_path, env={"RBLN_TEST_BACKEND_SLEEP_S": "120"})
    assert proc.stderr is not None
    deadline = time.time() + 120
    for line in proc.stderr:
        if "(test backend)" in line or time.time() > deadline:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)  # reap it and close its pipes
    temporaries = list((build / "cache" / "compile").glob(".tmp-*"))
    assert temporaries, "the compile should have been caught mid-write"
    assert [p for p in (build / "cache" / "compile").iterdir() if not p.name.startswith(".tmp-")] == []
    assert not (build / "artifacts").exists() or list((build / "artifacts").iterdir()) == []
    assert not (build / "manifest.json").exists()
    again = rbln([*PLANS, f"build_dir={build}"], cwd=tmp_path)
    check_ok(again)
    assert "interrupted build" in again.stderr
    assert not list(build.rglob(".tmp-*"))
    assert manifest(build) == manifest(plans_build)


def slow_plans_build(tmp_path: Path) -> Path:
    """A clean build of the plans with the slow test backend (its own compile keys), for comparison."""
    other = tmp_path / "clean"
    check_ok(rbln([*PLANS, SLOW, f"build_dir={other}"], cwd=tmp_path))
    return other


@pytest.mark.slow  # over 10 s: the default suite keeps under 10 minutes on 2 cores
def test_two_builds_at_once_on_one_build_dir(plans_build: Path, tmp_path: Path) -> None:
    build = tmp_path / "build"
    # Each compile lingers 1 s, so the first run surely holds the lock while the second starts.
    slow = {"RBLN_TEST_BACKEND_SLEEP_S": "1"}
    procs = [popen([*PLANS, SLOW, f"build_dir={build}"], cwd=tmp_path, env=slow) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    assert manifest(build) == manifest(slow_plans_build(tmp_path))
    assert not list(build.rglob(".tmp-*"))
    assert any("waiting for another rbln-build run" in err for _, err in outs)


def test_default_matrix_narrowed_to_a_plan_model_is_a_clean_success(tmp_path: Path) -> None:
    # The bare default matrix needs 4 torch exports (slow test below); narrowed to Qwen3-8B it runs
    # the same config, including its declared expected failure, in seconds.
    proc = rbln(["model=qwen3_8b"], cwd=tmp_path)
    check_ok(proc)
    assert "expected_failure" in proc.stdout and "qwen3_8b.atom_max_x4.b0.3" in proc.stdout
    cells = manifest(tmp_path / "build")["cells"]
    assert {cid: e["kvcache_num_blocks"] for cid, e in cells.items()} == {
        "qwen3_8b.atom_max_x4.b0.3": None,
        "qwen3_8b.atom_max_x4.b0.5": 14,
        "qwen3_8b.rebel100.b0.3": 21,
        "qwen3_8b.rebel100.b0.5": 40,
    }
    assert "4 cells: 2 compiled, 3 finalized, 0 skipped, 0 failed, 1 failed as expected" in proc.stdout


def test_include_adds_cells_after_the_matrix_and_reuses_its_compiles(plans_build: Path, tmp_path: Path) -> None:
    # A byte budget for one model on one device: on the whole matrix, 40GB would exceed an ATOM-Max
    # card's DRAM and fail those cells; as an include it is one cell, resolved from an existing compile.
    build = copy_build(plans_build, tmp_path)
    include = "matrix.include=[{models:[qwen3_8b],devices:[rebel100],budgets:[40GB]}]"
    proc = rbln([*PLANS, include, f"build_dir={build}"], cwd=tmp_path)
    check_ok(proc)
    s = summary(build)
    assert (s["cells"], s["compiled"], s["redone_cells"]) == (PLAN_CELLS + 1, 0, ["qwen3_8b.rebel100.b40GB"])
    cells = manifest(build)["cells"]
    cut, whole = cells["qwen3_8b.rebel100.b40GB"], cells["qwen3_8b.rebel100.b0.5"]
    assert cut["compile_key"] == whole["compile_key"]
    assert cut["num_min_blocks"] <= cut["kvcache_num_blocks"] < whole["kvcache_num_blocks"] == cut["num_full_blocks"]
    old = manifest(plans_build)["cells"]
    assert {cid: e for cid, e in cells.items() if cid in old} == old  # the matrix's own cells are unchanged
    table = [line.split()[0] for line in proc.stdout.splitlines()[2 : 2 + PLAN_CELLS + 1]]
    assert table[-1] == "qwen3_8b.rebel100.b40GB"  # after the main product
    # Narrowed to a device the entry does not list, the entry yields no cells to build; the manifest
    # still describes the declared matrix (a narrowed run keeps the other cells' entries, issue 19).
    check_ok(rbln([*PLANS, include, "device=atom_max_x4", f"build_dir={build}"], cwd=tmp_path))
    assert "qwen3_8b.rebel100.b40GB" not in summary(build)["redone_cells"]
    assert manifest(build)["cells"]["qwen3_8b.rebel100.b40GB"] == cut


def test_explain_is_dispatched(tmp_path: Path) -> None:
    proc = rbln(["explain", "model=qwen3_8b", "device=rebel100", "--json"], cwd=tmp_path)
    check_ok(proc)
    assert proc.stdout.strip()
    assert list(tmp_path.iterdir()) == []


def test_help_explains_groups_and_overrides(tmp_path: Path) -> None:
    proc = rbln(["--help"], cwd=tmp_path)
    check_ok(proc)
    for text in ("matrix", "device", "model", "budget=", "-m", "explain", "atom_max_x4", "doit list"):
        assert text in proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_doit_from_the_repo_root_sees_the_same_tasks(plans_build: Path, tmp_path: Path) -> None:
    build = copy_build(plans_build, tmp_path)
    env = dict(os.environ, RBLN_BUILD_OVERRIDES=f"matrix=plans build_dir={build}", HF_HUB_OFFLINE="1")
    listed = subprocess.run(["doit", "list", "--all"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]
    # one task per compile key and one per compile key's cells (qwen3_8b on rebel100: one RBLN-CR x1 compile)
    group = [n for n in names if n.startswith("cells:qwen3_8b.RBLN-CR.x1.")]
    assert len(group) == 1 and "manifest" in names, listed.stdout
    assert f"compile:{group[0].removeprefix('cells:')}" in names
    info = subprocess.run(["doit", "info", group[0]], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert info.returncode == 0 and "up-to-date" in info.stdout, info.stdout + info.stderr
    forget = subprocess.run(
        ["doit", "forget", group[0]],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert forget.returncode == 0, forget.stderr
    proc = rbln([*PLANS, f"build_dir={build}"], cwd=tmp_path)
    check_ok(proc)
    assert summary(build)["compiled"] == 0


# ------------------------------------------------------------------------------------------ slow


@pytest.mark.slow
def test_default_matrix_builds_then_noops(tmp_path: Path) -> None:
    proc = rbln([], cwd=tmp_path, timeout=900)
    check_ok(proc)
    build = tmp_path / "build"
    s = summary(build)
    assert s["cells"] == 18 and s["compiled"] == 8 and s["failed"] == 0
    assert s["expected_failure_cells"] == ["qwen3_8b.atom_max_x4.b0.3"]
    cells = manifest(build)["cells"]
    assert {e["produced"] for cid, e in cells.items() if cid.startswith("tiny_")} == {"program"}
    # The include cells: byte budgets that ship fewer blocks than the full pool, from the same compile.
    for cut, full in (
        ("tiny_llama.rebel100.b208MB", "tiny_llama.rebel100.b0.3"),
        ("tiny_qwen3.rebel100.b216MB", "tiny_qwen3.rebel100.b0.3"),
    ):
        low, whole = cells[cut], cells[full]
        assert low["compile_key"] == whole["compile_key"]
        assert (
            low["num_min_blocks"] <= low["kvcache_num_blocks"] < whole["kvcache_num_blocks"] == whole["num_full_blocks"]
        )
    for e in cells.values():
        if e["status"] == "ok":
            assert not (build / e["artifact"]["path"] / "rbln_config.json").exists()
            config = json.loads((build / e["artifact"]["path"] / "rbln-build.json").read_text())
            assert config["kvcache_num_blocks"] == e["kvcache_num_blocks"] > 0
            assert config["npu"] == e["inputs"]["npu"]
    modules = tmp_path / "modules.txt"
    again = rbln([], cwd=tmp_path, modules=modules)
    check_ok(again)
    s = summary(build)
    assert (s["compiled"], s["finalized"], s["redone_cells"]) == (0, 0, [])
    assert modules.read_text() == ""


@pytest.mark.slow
def test_tiny_programs_two_clean_builds_identical(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        check_ok(rbln(["matrix=tiny"], cwd=tmp_path / d, timeout=900))
    a, b = (tmp_path / d / "build" / "manifest.json" for d in ("a", "b"))
    assert a.read_bytes() == b.read_bytes()
    cells = manifest(tmp_path / "a" / "build")["cells"]
    low, full = cells["tiny_llama.atom_max.b90MB"], cells["tiny_llama.atom_max.b0.3"]
    assert low["produced"] == full["produced"] == "program"
    assert low["compile_key"] == full["compile_key"]
    assert low["num_min_blocks"] <= low["kvcache_num_blocks"] < full["kvcache_num_blocks"] == full["num_full_blocks"]
    assert cells["tiny_qwen3.atom_max.b90MB"]["status"] == "expected_failure"
    assert summary(tmp_path / "a" / "build")["compiled"] == 2
