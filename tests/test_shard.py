"""``shard=I/N`` (CI without Ray): two shards in two build dirs fill one remote cache; a merge run over
the whole matrix in a third compiles nothing and writes a manifest byte-identical to a single build's."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli import PLANS, check_ok, rbln, summary
from test_remote import seeded  # noqa: F401  (one plain build of matrix=plans, jobs=1)

pytest.importorskip(
    "fsspec",
    reason="fsspec is not installed: the remote cache needs the remote extra (pip install 'rbln-build[remote]')",
)
pytestmark = pytest.mark.integration


@pytest.mark.slow  # over 10 s: the default suite keeps under 10 minutes on 2 cores
def test_two_shards_and_a_merge_give_the_single_build_manifest_compiling_nothing(
    seeded: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    single, _ = seeded
    remote = f"cache.remote=file://{tmp_path / 'remote'}"
    compiled = []
    for i in (1, 2):
        out = tmp_path / f"shard{i}"
        proc = rbln([*PLANS, "jobs=1", f"build_dir={out}", remote, f"shard={i}/2"], cwd=tmp_path)
        check_ok(proc)
        assert f"shard {i}/2: 2 of 4 compile keys" in proc.stdout  # balanced: one 8B and one 1B key each
        compiled.append(summary(out)["compiled"])
    assert compiled == [2, 2]
    assert len(list((tmp_path / "remote" / "shards").iterdir())) == 2  # each shard's results, for the merge
    moved = tmp_path / "moved"
    proc = rbln([*PLANS, f"build_dir={moved}", remote, "shard=merge/2"], cwd=tmp_path)
    check_ok(proc)
    assert "0 compiled" in proc.stdout and "no program downloaded" in proc.stdout
    assert (moved / "manifest.json").read_bytes() == (single / "manifest.json").read_bytes()
    assert summary(moved)["compiled"] == 0 and not (moved / "cache" / "compile").exists()  # nothing fetched
    merge = tmp_path / "merge"
    proc = rbln([*PLANS, "jobs=2", f"build_dir={merge}", remote], cwd=tmp_path)
    check_ok(proc)
    assert summary(merge)["compiled"] == 0 and "warning" not in proc.stderr
    assert (merge / "manifest.json").read_bytes() == (single / "manifest.json").read_bytes()


@pytest.mark.slow
def test_a_sweep_over_every_shard_builds_each_and_merges_them(
    seeded: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """``-m shard=1/2,2/2``: each shard as its own run (not the union of both selections twice), then
    the merge: the sweep's manifest is the single build's, and every cell has its artifact link."""
    single, _ = seeded
    out, remote = tmp_path / "swept", f"cache.remote=file://{tmp_path / 'remote'}"
    proc = rbln(["-m", *PLANS, "jobs=1", f"build_dir={out}", remote, "shard=1/2,2/2"], cwd=tmp_path)
    check_ok(proc)
    assert "shard 1/2: 2 of 4 compile keys" in proc.stdout and "shard 2/2: 2 of 4 compile keys" in proc.stdout
    assert "merge of 2 shard(s): 8 cells, 0 compiled, 0 failed" in proc.stdout
    assert (out / "manifest.json").read_bytes() == (single / "manifest.json").read_bytes()
    assert len(list((tmp_path / "remote" / "shards").iterdir())) == 2
    linked = {p.name for p in (out / "artifacts").iterdir()}
    assert linked == {p.name for p in (single / "artifacts").iterdir()} and len(linked) == 7

    part = tmp_path / "part"  # a sweep over some shards of 3: no merge, one line naming what is left
    proc = rbln(["-m", *PLANS, "jobs=1", f"build_dir={part}", f"cache.remote=file://{tmp_path / 'r3'}",
                 "shard=1/3,2/3"], cwd=tmp_path)  # fmt: skip
    check_ok(proc)
    hint = [line for line in proc.stderr.splitlines() if line.startswith("rbln-build: this sweep ran shard(s)")]
    assert hint == [
        f"rbln-build: this sweep ran shard(s) 1/3, 2/3; after 3/3 ran with the same cache.remote, merge them: "
        f"rbln-build {PLANS[0]} jobs=1 build_dir={part} cache.remote=file://{tmp_path / 'r3'} shard=merge/3"
    ]
    assert "merge of" not in proc.stdout


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        ("shard=1/2,1/3", "rbln-build: shard: one sweep's shards split the matrix one way; got N = 2, 3 (1/2, 1/3)"),
        ("shard=null,1/2", "rbln-build: shard: this sweep mixes sharded jobs with a job without shard"),
    ],
)
def test_a_sweep_over_shards_of_different_n_is_refused(tmp_path: Path, sweep: str, message: str) -> None:
    proc = rbln(["-m", *PLANS, f"build_dir={tmp_path / 'b'}", f"cache.remote=file://{tmp_path / 'r'}", sweep],
                cwd=tmp_path)  # fmt: skip
    check_ok(proc, 2)
    assert proc.stderr.startswith(message) and not (tmp_path / "r").exists()


def test_the_assignment_is_deterministic_and_covers_every_key() -> None:
    from rbln_build.colocation import expand_all
    from rbln_build.config import compose_settings
    from rbln_build.config._shard import assign

    _, cells = expand_all([compose_settings(["matrix=plans"])])
    keys = {c.compile_key for c in cells}
    for n in (1, 2, 3, 8):
        owner = assign(cells, n)
        assert set(owner) == keys and set(owner.values()) <= set(range(1, n + 1))
        assert assign(list(reversed(cells)), n) == owner  # independent of the order cells come in
    assert sorted(assign(cells, 2).values()) == [1, 1, 2, 2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["shard=3/2", "cache.remote=file:///tmp/x"], "shard: expected I/N with 1 <= I <= N"),
        (["shard=1/2"], "a shard's entries reach the merge run only through a shared remote cache"),
        (["shard=1/2", "cache.remote=file:///tmp/x", "cache.remote_mode=read"], "set cache.remote=URL"),
        (["shard=merge/2"], "set cache.remote=URL"),
        (["shard=merge/0", "cache.remote=file:///tmp/x"], "or merge/N for the merge run"),
    ],
)
def test_bad_shards_are_configuration_errors(tmp_path: Path, args: list[str], message: str) -> None:
    proc = rbln([*PLANS, f"build_dir={tmp_path / 'b'}", *args], cwd=tmp_path)
    check_ok(proc, 2)
    assert message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_merge_names_the_missing_shard_and_compiles_nothing(tmp_path: Path) -> None:
    remote = f"cache.remote=file://{tmp_path / 'remote'}"
    proc = rbln([*PLANS, "jobs=1", f"build_dir={tmp_path / 'shard1'}", remote, "shard=1/2"], cwd=tmp_path)
    check_ok(proc)
    merge = tmp_path / "merge"
    proc = rbln([*PLANS, f"build_dir={merge}", remote, "shard=merge/2"], cwd=tmp_path)
    check_ok(proc, 1)
    missing = [line for line in proc.stderr.splitlines() if line.startswith("  shard ")]
    assert len(missing) == 2 and all(line.startswith("  shard 2/2: compile key ") for line in missing)
    assert "run shard(s) 2/2 again" in proc.stderr and "Traceback" not in proc.stderr
    assert not (merge / "manifest.json").exists() and not (merge / "cache" / "compile").exists()


def test_a_shard_file_is_read_bounded_and_a_foreign_record_is_not_taken(tmp_path: Path) -> None:
    import gzip
    import json

    from rbln_build.commands._shards._merge import _result
    from rbln_build.errors import CacheError
    from rbln_build.store import CellResult, RemoteStore, fetch_shard, shard_file

    store = RemoteStore(tmp_path / "cache", f"file://{tmp_path / 'remote'}")
    name = shard_file((1, 2), ["b" * 64, "a" * 64])
    assert name == shard_file((1, 2), ["a" * 64, "b" * 64]) != shard_file((2, 2), ["a" * 64, "b" * 64])
    assert fetch_shard(store, name) == (None, 0)  # not there: every cell of that shard is missing
    path = tmp_path / "remote" / name
    path.parent.mkdir(parents=True)
    mine = CellResult("a" * 64, "c" * 64, error="does not fit", error_kind="budget", retry=False)
    path.write_bytes(gzip.compress(json.dumps({"results": {"a" * 64: mine.to_json()}, "schema": 1}).encode(), mtime=0))
    results, size = fetch_shard(store, name)
    assert results is not None and size == path.stat().st_size

    class Cell:
        cell_key, compile_key = "a" * 64, "c" * 64

    assert _result(Cell, results["a" * 64]) == mine
    Cell.compile_key = "d" * 64  # a record of another compile key under this cell's key: not taken
    assert _result(Cell, results["a" * 64]) is None and _result(Cell, {"cell_key": 1}) is None
    for bad in (b"not gzip", gzip.compress(b"[1, 2]"), gzip.compress(b"{}")[:-3]):
        path.write_bytes(bad)
        with pytest.raises(CacheError, match="not a shard's results"):
            fetch_shard(store, name)
