"""The single pass over the Store (``_ledger.survey``): each compile key, result and artifact is
read once, through each compile key's results index when the records did not change since; the
records stay the ground truth, and a no-op writes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rbln_build.colocation import expand_all
from rbln_build.config import Cell, compose_settings
from rbln_build.execution._index import INDEX_KIND, read_index, read_record
from rbln_build.pipeline import BuildRun, survey
from rbln_build.store import CellResult, Store


def _build(build_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[BuildRun, list[Cell]]:
    _, cells = expand_all(
        [compose_settings(["matrix=plans", "matrix.budgets=[0.3,0.4,0.5]", f"build_dir={build_dir}"])]
    )
    run = BuildRun(build_dir, cells, progress=False)
    assert run.run() == 0
    run.summary()
    capsys.readouterr()
    return run, cells


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            st = os.lstat(os.path.join(dirpath, n))
            out[os.path.join(dirpath, n)] = (st.st_mtime_ns, st.st_ino)
    return out


@pytest.fixture
def built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[Path, list[Cell]]:
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path / "inventory"))
    _, cells = _build(tmp_path / "b", capsys)
    return tmp_path / "b", cells


def test_a_no_op_reads_the_index_and_writes_nothing_in_the_cache(
    built: tuple[Path, list[Cell]], capsys: pytest.CaptureFixture[str]
) -> None:
    build, cells = built
    keys = {c.compile_key for c in cells}
    assert sorted(p.name for p in (build / "cache" / INDEX_KIND).iterdir()) == sorted(f"{k}.json" for k in keys)
    ledger = survey(Store(build / "cache"), cells)
    assert ledger.standing == {c.id for c in cells} and ledger.from_index == {c.cell_key for c in cells}
    assert len(ledger.artifacts) < len([c for c in cells if ledger.stored[c.id].ok])  # shared ones once  # type: ignore[union-attr]
    before = _snapshot(build / "cache")
    manifest = (build / "manifest.json").read_bytes()
    run, _ = _build(build, capsys)
    assert (run.compiled, run.redone) == ([], set())
    assert _snapshot(build / "cache") == before and (build / "manifest.json").read_bytes() == manifest


def test_a_record_rewritten_after_the_index_is_read_from_the_record(built: tuple[Path, list[Cell]]) -> None:
    build, cells = built
    store = Store(build / "cache")
    cell = next(c for c in cells if c.id == "qwen3_8b.rebel100.b0.3")
    body = store.load_record("results", cell.cell_key)
    assert body is not None
    body["warnings"] = ["rewritten"]  # a consistent rewrite: the record's self-hash is recomputed
    store.save_record("results", cell.cell_key, body)
    ledger = survey(store, cells)
    assert cell.cell_key not in ledger.from_index
    assert ledger.stored[cell.id].warnings == ("rewritten",)  # type: ignore[union-attr]  # the record, not the index
    body["kvcache_num_blocks"] = 3  # a forgery that points the cell at another count
    store.save_record("results", cell.cell_key, body)
    ledger = survey(store, cells)
    assert ledger.stored[cell.id] is None and "artifact" in ledger.problems[cell.id]
    assert not store.record_path("results", cell.cell_key).exists()  # reported and removed, as reusable() does


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_index_is_ignored_and_rewritten(
    built: tuple[Path, list[Cell]], capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    build, cells = built
    store = Store(build / "cache")
    key = cells[0].compile_key
    assert key is not None
    path = build / "cache" / INDEX_KIND / f"{key}.json"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else data.replace(b'"plan"', b'"PLAN"', 1))
    assert read_index(store, key) == {}
    ledger = survey(store, cells)
    assert ledger.standing == {c.id for c in cells}  # read from the records instead
    assert not {c.cell_key for c in cells if c.compile_key == key} & ledger.from_index
    run, _ = _build(build, capsys)
    assert run.redone == set() and path.read_bytes() == data  # the same index again


def test_a_read_only_survey_removes_nothing(built: tuple[Path, list[Cell]]) -> None:
    build, cells = built
    store = Store(build / "cache")
    ok = next(c for c in cells if c.id == "llama3_2_1b.rebel100.b0.5")
    record = store.record_path("results", ok.cell_key)
    record.write_text("{")
    result = json.loads(json.dumps(store.load_record("results", cells[0].cell_key)))
    artifact = build / "cache" / "artifacts" / result["artifact_key"] / "files" / "rbln-build.json"
    artifact.write_text(artifact.read_text() + " ")
    ledger = survey(store, cells, read_only=True)
    assert ok.id not in ledger.standing and ledger.stored[ok.id] is None and record.read_text() == "{"
    assert ledger.artifact_state(ledger.stored[cells[0].id]) == "damaged" and artifact.is_file()  # type: ignore[arg-type]


def test_the_survey_lists_the_results_folder_once_and_stats_only_the_records_there(
    built: tuple[Path, list[Cell]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep's cells are packed and have no record file: the survey lists ``cache/results`` once
    instead of a failing stat per cell (10,008 of them in a fresh 10,008-cell build). The answer is
    the one a stat per cell gives."""
    from rbln_build.execution import _ledger

    build, cells = built
    store = Store(build / "cache")
    assert not list((build / "cache" / "results").glob("*.json"))  # all packed
    filed = cells[:2]  # these two get a record file, as a cell built without workers does
    for cell in filed:
        body = store.load_record("results", cell.cell_key)
        assert body is not None
        store.save_record("results", cell.cell_key, body)
    stats: list[str] = []
    real = _ledger.fingerprint
    monkeypatch.setattr(_ledger, "fingerprint", lambda path: stats.append(os.path.basename(path)) or real(path))
    listed = survey(store, cells)
    assert sorted(stats) == sorted(f"{c.cell_key}.json" for c in filed)
    assert all(isinstance(listed.fingerprints[c.cell_key], list) for c in filed)  # read from their files
    monkeypatch.setattr(_ledger, "record_files", lambda folder, cells: None)  # a stat per cell, as before
    stats.clear()
    each = survey(store, cells)
    assert len(stats) == len(cells)
    assert (listed.standing, listed.stored, listed.fingerprints, listed.problems) == (
        each.standing,
        each.stored,
        each.fingerprints,
        each.problems,
    )


def test_a_results_folder_much_bigger_than_the_run_is_not_listed(tmp_path: Path) -> None:
    """A cache shared by many build dirs can hold far more records than one run's cells: then a stat
    per cell is cheaper than listing them all."""
    from rbln_build.execution._ledger import record_files

    folder = tmp_path / "results"
    assert record_files(str(folder), 10) == set()  # no folder yet: nothing to stat
    folder.mkdir()
    names = {f"{i:064x}.json" for i in range(400)}
    for name in names:
        (folder / name).write_bytes(b"")
    assert record_files(str(folder), 1000) == names
    assert record_files(str(folder), 1) is None


def test_the_index_gives_each_cell_the_result_its_record_holds(built: tuple[Path, list[Cell]]) -> None:
    """The index is written from the results' own values (a tuple of warnings, answers shared by a
    row's cells): read back, each cell's result is the one its record holds."""
    build, cells = built
    store = Store(build / "cache")
    ledger = survey(store, cells)
    assert ledger.from_index == {c.cell_key for c in cells}
    for cell in cells:
        body = read_record(store, "results", cell.cell_key)
        assert body is not None and ledger.stored[cell.id] == CellResult.from_json(body)


def test_with_workers_each_keys_index_is_written_while_they_build_and_is_what_the_end_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """jobs=2: each compile key's index is written once the last of its cells is recorded
    (``IndexWhileBuilding``), the publish step writes none again, and each holds the bytes that
    writing it after the run gives."""
    from rbln_build.config import Scale
    from rbln_build.execution._index import index_cells

    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path / "inventory"))
    build = tmp_path / "b"
    _, cells = expand_all([compose_settings(["matrix=plans", "matrix.budgets=[0.3,0.4,0.5]", f"build_dir={build}"])])
    run = BuildRun(build, cells, progress=False, scale=Scale(jobs=2))
    assert run.run() == 0
    capsys.readouterr()
    keys = {c.compile_key for c in cells}
    assert run.parallel is not None and run.parallel.cell_results  # the workers built the cells
    assert run.indexing is not None and run.indexing.written == keys
    folder = build / "cache" / INDEX_KIND
    early = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert sorted(early) == sorted(f"{k}.json" for k in keys)
    assert index_cells(run.ledger, run.store, cells) == len(keys)  # written again, from scratch
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == early
    ledger = survey(Store(build / "cache"), cells)
    assert ledger.standing == {c.id for c in cells} and ledger.from_index == {c.cell_key for c in cells}
