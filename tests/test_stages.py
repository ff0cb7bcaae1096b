"""The build stages are pure functions over the Store: each can run in another process from the
Store and the cell alone, and gives the same CellResult and the same artifact bytes."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rbln_build.colocation import expand_all
from rbln_build.config._config import compose_settings
from rbln_build.config._matrix import Cell
from rbln_build.execution._stages import build_cell, compile_done, compile_once, resolve, reusable
from rbln_build.store._result import CellResult, CompileOutcome
from rbln_build.store._store import Entry, Store

CHILD = """
import json, pickle, sys
from rbln_build.execution._stages import build_cell
from rbln_build.store._store import Store
cell = pickle.loads(open(sys.argv[2], "rb").read())
print(json.dumps(build_cell(Store(sys.argv[1]), cell).to_json()))
"""


def _cells(*overrides: str) -> list[Cell]:
    return expand_all([compose_settings(["matrix=plans", "model=llama3_2_1b", "device=rebel100", *overrides])])[1]


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Store, list[Cell]]:
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path / "inventory"))
    cells = _cells()
    store = Store(tmp_path / "a" / "cache")
    cell = cells[0]
    assert cell.compile_key is not None and cell.spec is not None
    assert isinstance(compile_once(store, cell.compile_key, cell.spec, cell.backend), Entry)
    return store, cells


@pytest.mark.integration
def test_resolve_and_finalize_in_another_process_give_the_same_result_and_bytes(
    compiled: tuple[Store, list[Cell]], tmp_path: Path
) -> None:
    store, cells = compiled
    other = Store(tmp_path / "b" / "cache")  # the same compile entry, nothing else: a fresh store
    shutil.copytree(store.root / "compile", other.root / "compile")
    for i, cell in enumerate(cells):
        pickled = tmp_path / f"cell{i}.pickle"
        pickled.write_bytes(pickle.dumps(cell))
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(other.root), str(pickled)], capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        theirs = CellResult.from_json(json.loads(proc.stdout))
        ours = build_cell(store, cell)
        assert theirs == ours and ours.ok and ours.artifact_key is not None
        # the artifact files (entry.json differs only in its local stat fingerprint)
        assert _files(other.entry_path("artifacts", ours.artifact_key) / "files") == _files(
            store.entry_path("artifacts", ours.artifact_key) / "files"
        )
        assert reusable(other, cell) == theirs  # and the other store can reuse what the child stored


def test_a_cell_learns_its_compile_failure_from_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path / "inventory"))
    monkeypatch.setenv("RBLN_TEST_FAIL_FAMILY", "RBLN-CR")
    monkeypatch.setenv("RBLN_TEST_FAIL_ERROR", "input")
    cell = _cells("matrix.backend=rbln_test_plugins:FlakyBackend")[0]
    assert cell.compile_key is not None and cell.spec is not None
    store = Store(tmp_path / "cache")
    outcome = compile_once(store, cell.compile_key, cell.spec, cell.backend)
    assert isinstance(outcome, CompileOutcome) and not outcome.retry
    assert compile_done(store, cell.compile_key)  # a final failure: nothing to redo
    fresh = Store(tmp_path / "cache")  # as another process would see it
    result = resolve(fresh, cell)
    assert (result.error, result.error_kind, result.retry) == (
        "the compiler says this model does not fit",
        "insufficient_memory",
        False,
    )


def test_a_batch_of_cells_looks_each_entry_up_once(
    compiled: tuple[Store, list[Cell]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rbln_build.execution._jobs import StoreRef, cells_job

    store, built = compiled
    cells = _cells("matrix.budgets=[0.05,0.06,0.0601,0.07,0.3,0.5]")  # one compile key, some counts shared
    assert {c.compile_key for c in cells} == {built[0].compile_key}
    calls: list[tuple[str, str]] = []
    lookup = Store.lookup

    def counted(self: Store, kind: str, key: str, full: bool = False) -> Entry | None:
        calls.append((kind, key))
        return lookup(self, kind, key, full)

    monkeypatch.setattr(Store, "lookup", counted)
    done = cells_job(StoreRef(root=str(store.root)), cells)
    artifacts = {d.result.artifact_key for d in done}
    assert all(d.result.ok for d in done) and 1 < len(artifacts) < len(cells)
    # the compile entry once, each artifact once (a miss, then made by put): not once per cell
    assert sorted(set(calls)) == sorted(calls), calls
    assert {k for kind, k in calls if kind == "artifacts"} == artifacts
    assert [k for kind, k in calls if kind == "compile"] == [cells[0].compile_key]
    # and the batch's results are what cells built one by one give
    other = Store(store.root.parent / "one-by-one")
    shutil.copytree(store.root / "compile", other.root / "compile")
    assert [d.result for d in done] == [build_cell(other, c) for c in cells]


def test_a_rows_cells_share_their_answers_and_zeros_of_either_sign_stay_apart() -> None:
    """``resolve`` hands the cells of one row one object per equal floor/full-pool answer (so a batch
    pickles it once); equal answers whose JSON differs (0.0 and -0.0) never share one."""
    from rbln_build.estimator._breakdown import BudgetAnswer
    from rbln_build.execution._stages import _answer_json

    first = _answer_json(BudgetAnswer(5, 100, 100, 0.25, None))
    assert _answer_json(BudgetAnswer(5, 100, 100, 0.25, None)) is first
    assert first == BudgetAnswer(5, 100, 100, 0.25, None).to_json()
    plus, minus = _answer_json(BudgetAnswer(1, 0, 0, 0.0, None)), _answer_json(BudgetAnswer(1, 0, 0, -0.0, None))
    assert plus is not minus and json.dumps(minus["fraction"]) == "-0.0" and json.dumps(plus["fraction"]) == "0.0"


def test_with_artifact_is_replace_of_the_two_fields() -> None:
    from dataclasses import replace

    base = CellResult("a" * 64, "b" * 64, "plan", 5, 8, 3, 123, {"x": 1}, {"y": 2}, ("w",))
    made = base.with_artifact("c" * 64, "sha256:" + "d" * 64)
    assert made == replace(base, artifact_key="c" * 64, artifact_hash="sha256:" + "d" * 64)
    assert made.to_json() == replace(base, artifact_key="c" * 64, artifact_hash="sha256:" + "d" * 64).to_json()
    assert base.artifact_key is None and pickle.loads(pickle.dumps(made)) == made
