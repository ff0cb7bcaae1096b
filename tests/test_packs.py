"""Record packs (``store._files``, record packs): the scheduler records each batch of cells as one file per compile
key, ``cache/results/<sha256 of its bytes>.pack``, whose lines are the cells' records byte for byte.
A pack is read through its compile key's results index while it is untouched, scanned when no index
has its cells, verified as a whole and line by line, and kept by ``gc`` while any of its cells is."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from rbln_build.colocation import expand_all
from rbln_build.commands._gc import plan_gc
from rbln_build.config import Cell, compose_settings
from rbln_build.execution._index import INDEX_KIND
from rbln_build.execution._recording import record_batch
from rbln_build.pipeline import BuildRun, survey
from rbln_build.store import PACK_SUFFIX, CellResult, Store, read_pack, render_record

BUDGETS = "[0.3,0.4,0.5,0.6]"


def _cells(build_dir: Path, budgets: str = BUDGETS, *more: str) -> list[Cell]:
    settings = compose_settings(["matrix=plans", f"matrix.budgets={budgets}", f"build_dir={build_dir}", *more])
    return expand_all([settings])[1]


def _build(
    build_dir: Path, capsys: pytest.CaptureFixture[str], budgets: str = BUDGETS, *more: str
) -> tuple[BuildRun, str]:
    """The run and its warnings, one per line."""
    settings = compose_settings(["matrix=plans", f"matrix.budgets={budgets}", f"build_dir={build_dir}", *more])
    run = BuildRun(build_dir, expand_all([settings])[1], progress=False, scale=settings.scale)
    assert run.run() == 0
    run.summary()
    capsys.readouterr()
    return run, "\n".join(run.warnings)


def _packs(build: Path) -> list[Path]:
    return sorted((build / "cache" / "results").glob(f"*{PACK_SUFFIX}"))


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path / "inventory"))
    _build(tmp_path / "b", capsys)
    return tmp_path / "b"


def test_a_build_records_its_cells_in_packs_whose_lines_are_the_records(built: Path) -> None:
    cells = _cells(built)
    results = built / "cache" / "results"
    assert not list(results.glob("*.json"))  # no record file per cell
    packs = _packs(built)
    assert 0 < len(packs) <= len(cells)  # one per batch and compile key (a small matrix: a cell a batch)
    store = Store(built / "cache")
    found: dict[str, str] = {}
    for pack in packs:
        data = pack.read_bytes()
        assert hashlib.sha256(data).hexdigest() == pack.stem  # named by its bytes
        read = read_pack(str(pack), pack.stem)
        assert read is not None and read[1] == []
        bodies = read[0]
        assert {b["compile_key"] for b in bodies.values()} == {next(iter(bodies.values()))["compile_key"]}
        # each line is exactly the record file the cell would have had
        assert data == b"".join(render_record(k, b) + b"\n" for k, b in bodies.items())
        for key in bodies:
            assert key not in found
            found[key] = pack.stem
    assert set(found) == {c.cell_key for c in cells}
    for cell in cells:
        assert (
            store.load_record("results", cell.cell_key)
            == read_pack(store.pack_path(found[cell.cell_key]), found[cell.cell_key])[0][cell.cell_key]
        )  # type: ignore[index]
    index = json.loads((built / "cache" / INDEX_KIND / f"{cells[0].compile_key}.json").read_bytes().partition(b"\n")[2])
    assert set(index["packs"]) == {found[c.cell_key] for c in cells if c.compile_key == cells[0].compile_key}
    assert all(isinstance(stat, str) for stat, _row in index["cells"].values())  # rows name their pack


def test_without_the_indexes_a_rebuild_scans_the_packs_and_redoes_nothing(
    built: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = (built / "manifest.json").read_bytes()
    for index in (built / "cache" / INDEX_KIND).iterdir():
        index.unlink()  # as a run killed before it wrote them leaves it
    ledger = survey(Store(built / "cache"), _cells(built))
    assert ledger.from_index == set() and len(ledger.standing) == len(_cells(built))
    run, err = _build(built, capsys)
    assert (run.compiled, run.redone, err) == ([], set(), "")
    assert (built / "manifest.json").read_bytes() == manifest
    assert sorted(p.name for p in (built / "cache" / INDEX_KIND).iterdir())  # written again


def test_a_damaged_pack_is_reported_removed_and_its_cells_redone(
    built: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = (built / "manifest.json").read_bytes()
    pack = _packs(built)[0]
    held = set(read_pack(str(pack), pack.stem)[0])  # type: ignore[index]
    data = bytearray(pack.read_bytes())
    data[len(data) // 2] ^= 0x01
    pack.write_bytes(bytes(data))
    run, err = _build(built, capsys)
    assert f"cache pack {pack} is corrupt" in err and "removed, its cells will be redone" in err
    assert not pack.exists()
    assert {c.cell_key for c in _cells(built) if c.id in run.redone} == held
    assert (built / "manifest.json").read_bytes() == manifest  # the same results, built again


def test_a_forged_pack_that_hashes_to_its_name_is_caught_by_its_cells_keys(
    built: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = (built / "manifest.json").read_bytes()
    pack = _packs(built)[0]
    bodies = read_pack(str(pack), pack.stem)[0]  # type: ignore[index]
    victim = next(k for k, b in bodies.items() if b["kvcache_num_blocks"])
    bodies[victim] = {**bodies[victim], "kvcache_num_blocks": bodies[victim]["kvcache_num_blocks"] + 1}
    data = b"".join(render_record(k, b) + b"\n" for k, b in bodies.items())
    forged = pack.parent / f"{hashlib.sha256(data).hexdigest()}{PACK_SUFFIX}"
    forged.write_bytes(data)  # consistent: it hashes to its name, each line to its own hash
    pack.unlink()
    cell = next(c for c in _cells(built) if c.cell_key == victim)
    run, err = _build(built, capsys)
    assert f"of cell {cell.id}: it points at artifact" in err and str(forged) in err
    assert cell.id in run.redone
    assert (built / "manifest.json").read_bytes() == manifest


def test_a_record_file_counts_over_a_pack_until_the_cell_is_redone_into_a_pack(
    built: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cell = _cells(built)[0]
    store = Store(built / "cache")
    body = store.load_record("results", cell.cell_key)
    assert body is not None
    store.save_record("results", cell.cell_key, {**body, "retry": True})  # e.g. an older build's, to retry
    assert survey(Store(built / "cache"), [cell]).standing == set()  # the file, not the pack
    run, _ = _build(built, capsys, BUDGETS, "jobs=2")  # with workers (one cell alone is built in process)
    assert run.redone == {cell.id}
    assert not store.record_path("results", cell.cell_key).exists()  # its new record is packed
    again = Store(built / "cache")
    assert again.load_record("results", cell.cell_key) == body
    assert survey(again, [cell]).standing == {cell.id}


def test_the_newest_pack_holding_a_cell_counts(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache")
    key = "ab" * 32
    old = {"cell_key": key, "retry": True}
    new = {"cell_key": key, "retry": False}
    first, _ = store.save_pack([(key, render_record(key, old))])
    second, _ = store.save_pack([(key, render_record(key, new))])
    os.utime(store.pack_path(first), ns=(2_000_000_000_000_000_000, 2_000_000_000_000_000_000))
    os.utime(store.pack_path(second), ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    assert Store(tmp_path / "cache").load_record("results", key) == old  # the newer by its time
    store.drop_record("results", key)  # found forged: this Store never gives it again
    assert store.load_record("results", key) is None


def test_gc_keeps_a_pack_while_any_of_its_cells_is_kept(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _build(built, capsys, "[0.3]")  # narrowed: the manifest names the 0.3 cells only
    kept = {c.cell_key for c in _cells(built, "[0.3]")}
    rows, _notes = plan_gc(built, _cells(built, "[0.3]"), [])
    removed = {path for what, path, _n in rows if what == "results"}
    for pack in _packs(built):
        holds = set(read_pack(str(pack), pack.stem)[0])  # type: ignore[index]
        assert (pack in removed) == holds.isdisjoint(kept)
    assert removed  # the 0.4-0.6 cells' packs
    for path in removed:
        path.unlink()
    run, err = _build(built, capsys, "[0.3]")
    assert (run.compiled, run.redone, err) == ([], set(), "")  # everything kept still stands


def _failed_results(cells: list[Cell]) -> list[CellResult]:
    return [CellResult(c.cell_key, c.compile_key, error="x", error_kind="build_failed") for c in cells]


def test_a_batch_is_recorded_as_one_pack_per_compile_key_and_in_a_shared_cache_as_files(tmp_path: Path) -> None:
    cells = _cells(tmp_path / "b")
    keys = sorted({c.compile_key for c in cells})[:2]
    batch = [c for c in cells if c.compile_key in keys]
    results = _failed_results(batch)
    store = Store(tmp_path / "b" / "cache")
    assert record_batch(store, batch, results, [None] * len(batch), set()) == results
    packs = _packs(tmp_path / "b")
    assert len(packs) == 2
    held = [read_pack(str(p), p.stem)[0] for p in packs]  # type: ignore[index]
    assert sorted(next(iter(h.values()))["compile_key"] for h in held) == keys
    assert set().union(*held) == {c.cell_key for c in batch}
    for cell, result in zip(batch, results, strict=True):
        assert Store(tmp_path / "b" / "cache").load_record("results", cell.cell_key) == result.to_json()
    shared = Store(tmp_path / "s", owner="build-a")  # other build dirs read a shared cache's records
    record_batch(shared, batch, results, [None] * len(batch), set())
    assert sorted(p.name for p in (tmp_path / "s" / "results").iterdir()) == sorted(f"{c.cell_key}.json" for c in batch)


def test_a_pack_that_cannot_be_written_makes_its_cells_retryable_failures(tmp_path: Path) -> None:
    batch = _cells(tmp_path / "b")[:3]
    (tmp_path / "b" / "cache").mkdir(parents=True)
    (tmp_path / "b" / "cache" / "results").write_text("not a folder")
    out = record_batch(Store(tmp_path / "b" / "cache"), batch, _failed_results(batch), [None] * 3, set())
    assert all(r.retry and r.error_kind == "build_failed" for r in out)
    assert all(f"cannot record the cell's result in {tmp_path / 'b' / 'cache'}" in str(r.error) for r in out)
