"""The manifest describes the declared matrix: a narrowed run (`rbln-build model=NAME`, `budget=`) updates
its own cells and keeps the others' entries, so `status` and `gc` agree with it (issue 19, item 6).

Plans only (no torch export), through the real CLI on a small project."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_status import check, rbln

pytestmark = pytest.mark.integration

MATRIX = "models: [llama3_2_1b, qwen3_0_6b]\ndevices: [rebel100]\nbudgets: [0.3, 0.5]\n"
CELLS = [
    "llama3_2_1b.rebel100.b0.3",
    "llama3_2_1b.rebel100.b0.5",
    "qwen3_0_6b.rebel100.b0.3",
    "qwen3_0_6b.rebel100.b0.5",
]


def project(root: Path, matrix: str = MATRIX) -> Path:
    (root / "conf" / "matrix").mkdir(parents=True)
    (root / "rbln-build.yaml").write_text("# a project\n")
    (root / "conf" / "matrix" / "default.yaml").write_text(matrix)
    return root


def cells(root: Path) -> dict[str, dict]:
    return json.loads((root / "build" / "manifest.json").read_text())["cells"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = project(tmp_path_factory.mktemp("declared") / "proj")
    check(rbln(["progress=false"], cwd=root))
    assert sorted(cells(root)) == CELLS
    return root


@pytest.mark.slow
def test_a_narrowed_run_keeps_the_other_cells_and_status_and_gc_agree(built: Path, tmp_path: Path) -> None:
    root = tmp_path / "proj"
    shutil.copytree(built, root, symlinks=True)
    full = (root / "build" / "manifest.json").read_bytes()
    # the budget of one model changes: its cells are rebuilt by a narrowed run, the other model's are kept
    (root / "conf" / "matrix" / "default.yaml").write_text(MATRIX.replace("[0.3, 0.5]", "[0.3, 0.4]"))
    out = check(rbln(["progress=false", "model=llama3_2_1b"], cwd=root))
    assert "2 cells:" in out  # the run's table and counts: its own cells only
    after = cells(root)
    assert sorted(after) == ["llama3_2_1b.rebel100.b0.3", "llama3_2_1b.rebel100.b0.4", "qwen3_0_6b.rebel100.b0.3"]
    before = json.loads(full)["cells"]
    assert after["qwen3_0_6b.rebel100.b0.3"] == before["qwen3_0_6b.rebel100.b0.3"]  # kept as it was
    assert "qwen3_0_6b.rebel100.b0.5" not in after  # no longer declared: dropped, as a full run drops it
    assert (root / "build" / "artifacts" / "qwen3_0_6b.rebel100.b0.3").is_symlink()
    # status of the declared matrix: qwen3_0_6b.b0.4 was never built; the rest is up to date
    proc = rbln(["status", "--json"], cwd=root)
    report = json.loads(check(proc, 1))
    states = {c["cell"]: c["state"] for c in report["cells"]}
    assert states == {
        "llama3_2_1b.rebel100.b0.3": "up to date",
        "llama3_2_1b.rebel100.b0.4": "up to date",
        "qwen3_0_6b.rebel100.b0.3": "up to date",
        "qwen3_0_6b.rebel100.b0.4": "would re-resolve",
    }
    assert report["removed"] == []
    # narrowed status agrees: its own cells up to date, the others not called removed
    narrowed = json.loads(check(rbln(["status", "--json", "model=llama3_2_1b"], cwd=root)))
    assert narrowed["up_to_date"] and narrowed["removed"] == []


@pytest.mark.slow
def test_narrowed_runs_one_after_the_other_give_the_full_runs_manifest(built: Path, tmp_path: Path) -> None:
    root = tmp_path / "proj"
    shutil.copytree(built, root, symlinks=True)
    full = (root / "build" / "manifest.json").read_bytes()
    check(rbln(["progress=false", "model=qwen3_0_6b"], cwd=root))
    assert (root / "build" / "manifest.json").read_bytes() == full  # byte-identical: nothing dropped
    check(rbln(["progress=false", "budget=0.3"], cwd=root))
    assert (root / "build" / "manifest.json").read_bytes() == full
    assert json.loads(check(rbln(["status", "--json"], cwd=root)))["up_to_date"]
    gc = json.loads(check(rbln(["gc", "--dry-run", "--json"], cwd=root)))
    assert gc["removed"] == [] and gc["bytes"] == 0  # nothing a manifest references is collected
    gc_narrowed = json.loads(check(rbln(["gc", "--dry-run", "--json", "model=qwen3_0_6b"], cwd=root)))
    assert gc_narrowed["removed"] == []
    # and release agrees: a release taken after the narrowed runs holds the whole declared matrix
    released = json.loads(check(rbln(["release", "after-narrowed", "--json"], cwd=root)))
    assert released["cells"] == CELLS and released["not_released"] == {}
    body = json.loads((root / "build" / "releases" / "after-narrowed" / "release.json").read_bytes())
    assert sorted(body["cells"]) == CELLS


def test_a_narrowed_run_in_a_fresh_build_dir_lists_only_what_it_built(tmp_path: Path) -> None:
    root = project(tmp_path / "proj")
    check(rbln(["progress=false", "model=qwen3_0_6b", "budget=0.5"], cwd=root))
    assert sorted(cells(root)) == ["qwen3_0_6b.rebel100.b0.5"]  # the others have no results: not listed
