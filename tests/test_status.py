"""`rbln-build status`, `diff` and `gc` through the real CLI, on a small project of plans (no
torch export): the CI drift check names what changed; diff compares releases; gc cleans up."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rbln_build.commands._status import changed_inputs
from rbln_build.inspection._diff import diff_manifests
from rbln_build.memory._shipped import shipped_dir

MATRIX = "models: [llama3_2_1b]\ndevices: [rebel100]\nbudgets: [0.3, 0.5]\n"


def rbln(args: list[str], cwd: Path, modules: Path | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
    runner = ["-m", "rbln_build.cli"] if modules is None else ["-m", "rbln_cli_imports", str(modules)]
    return subprocess.run(
        [sys.executable, *runner, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        **kw,
    )


def check(proc: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert proc.returncode == code, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project (only conf/matrix/default.yaml) built once; tests copy it."""
    root = tmp_path_factory.mktemp("proj") / "proj"
    (root / "conf" / "matrix").mkdir(parents=True)
    (root / "rbln-build.yaml").write_text("# a project\n")
    (root / "conf" / "matrix" / "default.yaml").write_text(MATRIX)
    check(rbln(["progress=false"], cwd=root))
    return root


@pytest.fixture
def project(built: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "proj"
    shutil.copytree(built, dst, symlinks=True)
    return dst


def status(root: Path, *args: str, code: int = 0) -> dict[str, Any]:
    out = check(rbln(["status", "--json", *args], cwd=root / "conf"), code)  # from a subfolder
    data = json.loads(out)
    return {c["cell"]: c for c in data["cells"]} | {"_removed": data["removed"], "_clean": data["up_to_date"]}


def test_up_to_date_after_a_build_and_no_torch_imported(project: Path, tmp_path: Path) -> None:
    modules = tmp_path / "modules.txt"
    out = check(rbln(["status"], cwd=project, modules=modules))
    assert modules.read_text() == "", f"status imported: {modules.read_text()}"
    assert out.count("up to date") == 3  # two cells and the count line
    s = status(project)
    assert s["_clean"] and s["llama3_2_1b.rebel100.b0.3"]["state"] == "up to date"


def test_a_budget_edit_is_named(project: Path) -> None:
    (project / "conf" / "matrix" / "default.yaml").write_text(MATRIX.replace("0.5", "0.4"))
    text = check(rbln(["status"], cwd=project), 1)
    assert "budget changed: 0.5 -> 0.4" in text
    s = status(project, code=1)
    assert s["llama3_2_1b.rebel100.b0.4"]["state"] == "would re-resolve"
    assert s["llama3_2_1b.rebel100.b0.3"]["state"] == "up to date"
    assert s["_removed"] == ["llama3_2_1b.rebel100.b0.5"]


def test_recipe_bytes_and_build_options_are_named(project: Path) -> None:
    recipes = project / "recipes"
    shutil.copytree(shipped_dir("recipes") / "llama3_2_1b", recipes / "llama3_2_1b")
    s = status(project)
    assert s["_clean"]  # the same bytes from another folder: the keys hash content, not paths
    with open(recipes / "llama3_2_1b" / "recipe.yaml", "a") as f:
        f.write("# edited\n")
    s = status(project, code=1)
    cell = s["llama3_2_1b.rebel100.b0.3"]
    assert cell["state"] == "would compile" and any(r.startswith("recipe bytes changed") for r in cell["reasons"])
    (recipes / "llama3_2_1b" / "recipe.yaml").write_bytes(
        (shipped_dir("recipes") / "llama3_2_1b" / "recipe.yaml").read_bytes()
    )
    (project / "conf" / "model").mkdir()
    (project / "conf" / "model" / "llama3_2_1b.yaml").write_text("recipe: llama3_2_1b\nbatch_size: 2\n")
    cell = status(project, code=1)["llama3_2_1b.rebel100.b0.3"]
    assert cell["state"] == "would compile"
    assert any(r.startswith("build option batch_size changed") and r.endswith("-> 2") for r in cell["reasons"]), cell


def test_a_damaged_artifact_is_named_and_left_in_place(project: Path) -> None:
    m = json.loads((project / "build" / "manifest.json").read_text())
    art = (project / "build" / m["cells"]["llama3_2_1b.rebel100.b0.5"]["artifact"]["path"] / "config.json").resolve()
    art.write_text(art.read_text() + " ")  # one byte more in a file of the artifact
    cell = status(project, code=1)["llama3_2_1b.rebel100.b0.5"]
    assert cell == {"cell": "llama3_2_1b.rebel100.b0.5", "state": "would finalize", "reasons": ["artifact damaged"]}
    assert art.is_file()  # status never removes anything
    check(rbln(["progress=false"], cwd=project))
    assert status(project)["_clean"]


def test_changed_inputs_names_toolchain_and_code() -> None:
    old = {
        "recipe": "r",
        "recipe_hash": "a",
        "weights_hash": "w1",
        "build_options": {"batch_size": 1},
        "memory_budget": 1,
        "toolchain": {"torch": "2.13.0"},
        "code": {"backend": "x", "estimator": "e"},
    }
    new = dict(
        old,
        weights_hash="w2",
        memory_budget=1.0,
        toolchain={"torch": "2.14.0"},
        code={"backend": "y", "estimator": "e"},
    )
    assert changed_inputs(old, new) == [
        "weights changed (recipe r's checkpoint)",
        "budget changed: 1 -> 1.0",  # one byte is not 100%
        "toolchain version changed: torch 2.13.0 -> 2.14.0",
        "backend code changed (None backend sources)",
    ]


def _entry(blocks: int | None, **kw: Any) -> dict[str, Any]:
    return {
        "kvcache_num_blocks": blocks,
        "memory_budget": 0.3,
        "budget_bytes": 10,
        "num_min_blocks": 9,
        "num_full_blocks": 40,
        "status": "ok",
        "compile_key": "k" * 64,
        "inputs": {"toolchain": {"torch": "1"}},
    } | kw


def test_diff_reports_and_exits_on_count_changes(project: Path, tmp_path: Path) -> None:
    same = diff_manifests({"a": _entry(21)}, {"a": _entry(21)})
    assert same == {
        "added": [],
        "removed": [],
        "budget_edits": {},
        "option_edits": {},
        "changed": {},
        "counts_changed": False,
    }
    d = diff_manifests(
        {"a": _entry(21), "b": _entry(5)},
        {"a": _entry(21, compile_key="j" * 64, inputs={"toolchain": {"torch": "2"}}), "c": _entry(7)},
    )
    assert d["added"] == ["c"] and d["removed"] == ["b"] and d["counts_changed"]
    assert d["changed"] == {"a": {"compile_key": ["k" * 64, "j" * 64], "toolchain": [{"torch": "1"}, {"torch": "2"}]}}
    budget = diff_manifests({"a": _entry(21)}, {"a": _entry(14, memory_budget=0.5, budget_bytes=20)})
    assert budget["changed"]["a"] == {
        "kvcache_num_blocks": [21, 14],
        "memory_budget": [0.3, 0.5],
        "budget_bytes": [10, 20],
    }
    who = {"model": "m", "device": "d", "toolchain": {"torch": "1"}}
    edit = diff_manifests(
        {"m.d.b0.3": _entry(21, inputs=who)}, {"m.d.b0.5": _entry(40, memory_budget=0.5, budget_bytes=20, inputs=who)}
    )
    assert edit["budget_edits"] == {"m.d.b0.5": "m.d.b0.3"} and edit["added"] == edit["removed"] == []
    assert edit["changed"]["m.d.b0.5"]["kvcache_num_blocks"] == [21, 40] and edit["counts_changed"]
    old = tmp_path / "old.json"
    shutil.copyfile(project / "build" / "manifest.json", old)
    assert "no differences" in check(rbln(["diff", str(old), str(project / "build" / "manifest.json")], cwd=tmp_path))
    check(rbln(["progress=false", "matrix.budgets=[0.3,0.4]"], cwd=project))
    new = project / "build" / "manifest.json"
    # the budget edit 0.5 -> 0.4 pairs each cell with its old self: a change, not an added and a removed
    # cell; its resolved count stays (the full pool at both), so the exit status says no count changed
    text = check(rbln(["diff", str(old), str(new)], cwd=tmp_path), 0)
    assert re.search(r"llama3_2_1b\.rebel100\.b0\.5 -> llama3_2_1b\.rebel100\.b0\.4 +budget 0\.5 -> 0\.4 ", text), text
    assert text.splitlines()[-1] == "0 added, 0 removed, 1 changed (1 by a budget edit); no resolved count changed."
    diffed = json.loads(check(rbln(["diff", "--json", str(old), str(new)], cwd=tmp_path), 0))
    assert diffed["removed"] == diffed["added"] == []
    assert diffed["budget_edits"]["llama3_2_1b.rebel100.b0.4"] == "llama3_2_1b.rebel100.b0.5"
    assert diffed["changed"]["llama3_2_1b.rebel100.b0.4"]["memory_budget"] == [0.5, 0.4]
    proc = rbln(["diff", str(old), str(tmp_path / "missing.json")], cwd=tmp_path)
    assert proc.returncode == 2 and "missing.json: cannot read it" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "old, new, says",
    [
        pytest.param({"a": _entry(8)}, {}, "0 added, 1 removed, 0 changed; resolved counts changed "
                     "(1 removed cell had a count): review before release.", id="removed"),
        pytest.param({}, {"a": _entry(8), "b": _entry(None, status="failed")}, "2 added, 0 removed, 0 changed; "
                     "resolved counts changed (1 added cell has a count): review before release.", id="added"),
        pytest.param({"a": _entry(8), "b": _entry(9)}, {"a": _entry(9), "c": _entry(2)}, "1 added, 1 removed, "
                     "1 changed; resolved counts changed (1 count changed, 1 added cell has a count, 1 removed "
                     "cell had a count): review before release.", id="all"),
    ],
)  # fmt: skip
def test_diff_says_which_counts_changed(old: dict[str, Any], new: dict[str, Any], says: str) -> None:
    """'0 changed; resolved counts changed' read as a contradiction: the summary says why."""
    from rbln_build.inspection._diff import render

    assert render(diff_manifests(old, new), old, new).splitlines()[-1] == says


def test_gc_removes_only_what_nothing_references(project: Path, tmp_path: Path) -> None:
    build = project / "build"
    release = tmp_path / "release.json"
    shutil.copyfile(build / "manifest.json", release)
    check(rbln(["progress=false", "matrix.budgets=[0.3,0.4]"], cwd=project))
    (build / "artifacts" / "users-file").write_text("mine")
    files_before = sorted(p for p in build.rglob("*"))
    dry = check(rbln(["gc", "--dry-run", "matrix.budgets=[0.3,0.4]"], cwd=project))
    assert "would remove link      artifacts/llama3_2_1b.rebel100.b0.5" in dry and "dry run" in dry
    assert sorted(p for p in build.rglob("*")) == files_before
    kept = json.loads(
        check(rbln(["gc", "--json", "--dry-run", "--keep", str(release), "matrix.budgets=[0.3,0.4]"], cwd=project))
    )
    assert kept["removed"] == []  # the release manifest keeps its cache entries and its artifacts/ links
    out = json.loads(check(rbln(["gc", "--json", "matrix.budgets=[0.3,0.4]"], cwd=project)))
    kinds = sorted(r["kind"] for r in out["removed"])
    # b0.5's stored result goes; its artifact (the full pool, 32 blocks) is b0.4's too, so it stays
    assert kinds == ["link", "results"] and out["bytes"] > 0
    assert out["bytes"] == sum(r["bytes"] for r in out["removed"])
    assert not (build / "artifacts" / "llama3_2_1b.rebel100.b0.5").is_symlink()
    assert (build / "artifacts" / "users-file").read_text() == "mine"
    assert any("users-file" in n for n in out["notes"])
    assert status(project, "matrix.budgets=[0.3,0.4]")["_clean"]  # nothing the manifest needs was removed
    again = json.loads(check(rbln(["gc", "--json", "matrix.budgets=[0.3,0.4]"], cwd=project)))
    assert again["removed"] == []


@pytest.mark.parametrize("command", [["gc"], ["doit"]], ids=["gc", "doit-run"])
def test_gc_and_doit_wait_for_the_build_lock(project: Path, command: list[str]) -> None:
    from filelock import FileLock

    lock = FileLock(str(project / "build" / ".lock"))
    lock.acquire()
    try:
        if command == ["gc"]:
            args = [sys.executable, "-m", "rbln_build.cli", "gc"]
        else:
            dodo = Path(__file__).resolve().parents[1] / "dodo.py"
            args = [sys.executable, "-m", "doit", "-f", str(dodo), "-d", str(project), "run"]  # -d: the project
        proc = subprocess.Popen(
            args,
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, HF_HUB_OFFLINE="1"),
        )
        try:
            waited = ""
            deadline = time.monotonic() + 120
            while "waiting for another rbln-build run" not in waited and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()
                waited += os.read(proc.stderr.fileno(), 4096).decode()  # type: ignore[union-attr]
            assert "waiting for another rbln-build run" in waited
        finally:
            lock.release()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err


def test_a_damaged_result_record_is_a_re_resolve_and_is_not_removed(project: Path) -> None:
    m = json.loads((project / "build" / "manifest.json").read_text())
    record = project / "build" / "cache" / "results" / f"{m['cells']['llama3_2_1b.rebel100.b0.3']['cell_key']}.json"
    record.write_text(record.read_text().replace('"kvcache_num_blocks":32', '"kvcache_num_blocks":31'))
    cell = status(project, code=1)["llama3_2_1b.rebel100.b0.3"]
    assert cell["state"] == "would re-resolve" and cell["reasons"] == ["no stored result for this cell key"]
    assert record.is_file()  # status reads the Store without changing it


def test_status_and_gc_agree_on_a_cell_the_manifest_still_lists(project: Path) -> None:
    """A new user's puzzle (issue 36): status called a cell outside the matrix 'removed ... gc removes
    its link', and gc then removed nothing, since manifest.json still lists it. They now agree:
    status says gc keeps it while the manifest lists it, and gc keeps it."""
    cid = "llama3_2_1b.rebel100.b0.5"
    out = check(rbln(["status", "matrix.budgets=[0.3,0.4]"], cwd=project), 1)
    (line,) = [x for x in out.splitlines() if x.startswith(cid)]
    assert "not in matrix" in line and "removed" not in line
    assert "`rbln-build gc` keeps it until a build of this matrix drops it" in line and "status` with those" in line
    assert out.splitlines()[-1].startswith("2 cells: ") and "1 not in matrix" in out.splitlines()[-1]
    dry = json.loads(check(rbln(["gc", "--json", "--dry-run", "matrix.budgets=[0.3,0.4]"], cwd=project)))
    assert f"artifacts/{cid}" not in {r["path"] for r in dry["removed"]}
    assert (project / "build" / "artifacts" / cid).is_symlink()
