"""The content-addressed store: atomic entries, verified before use, corruption is a warning and a miss."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rbln_build.errors import BuildError
from rbln_build.pipeline._publish import link_atomic
from rbln_build.store import Store, content_hash, write_atomic

K1 = "1" * 64  # cache keys are sha256 hex digests
C1 = "c" * 64


def _store(tmp_path: Path) -> tuple[Store, list[str]]:
    warnings: list[str] = []
    return Store(tmp_path / "cache", warn=warnings.append), warnings


def _fill(files: Path) -> dict[str, object]:
    (files / "sub").mkdir()
    (files / "a.bin").write_bytes(b"\x00" * 1000)
    (files / "sub" / "b.json").write_text('{"x": 1}')
    return {"produced": "plan"}


def test_put_then_lookup(tmp_path: Path) -> None:
    store, warnings = _store(tmp_path)
    entry = store.put("compile", K1, _fill)
    again = store.lookup("compile", K1)
    assert again is not None and again.content_hash == entry.content_hash and again.meta == {"produced": "plan"}
    assert (again.files / "sub" / "b.json").read_text() == '{"x": 1}'
    assert not warnings
    assert [p.name for p in (tmp_path / "cache" / "compile").iterdir()] == [K1]  # no temporaries left


def test_hash_covers_names_order_and_meta(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
    (a / "x").write_bytes(b"12")
    (a / "y").write_bytes(b"3")
    (b / "x").write_bytes(b"1")
    (b / "y").write_bytes(b"23")  # same concatenated bytes, different files
    assert content_hash(a, {}) != content_hash(b, {})
    assert content_hash(a, {}) != content_hash(a, {"m": 1})
    assert content_hash(a, {"m": 1, "n": 2}) == content_hash(a, {"n": 2, "m": 1})


@pytest.mark.parametrize("keep_stat", [False, True], ids=["plain-rewrite", "rewrite-restoring-size-and-mtime"])
def test_tampered_entry_is_reported_removed_and_missed(tmp_path: Path, keep_stat: bool) -> None:
    store, warnings = _store(tmp_path)
    entry = store.put("compile", K1, _fill)
    victim = entry.files / "a.bin"
    st = victim.stat()
    victim.write_bytes(b"\x01" * 1000)
    if keep_stat:
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert store.lookup("compile", K1) is None
    assert len(warnings) == 1 and "corrupt" in warnings[0]
    assert not entry.path.exists()
    assert store.put("compile", K1, _fill).content_hash == entry.content_hash  # rebuilt


def test_tampered_metadata_is_caught(tmp_path: Path) -> None:
    store, warnings = _store(tmp_path)
    entry = store.put("compile", K1, _fill)
    record = json.loads((entry.path / "entry.json").read_text())
    record["meta"]["produced"] = "program"
    (entry.path / "entry.json").write_text(json.dumps(record))
    assert store.lookup("compile", K1) is None and warnings


@pytest.mark.parametrize("damage", ["truncate", "garbage", "delete"])
def test_unreadable_entry_record(tmp_path: Path, damage: str) -> None:
    store, warnings = _store(tmp_path)
    entry = store.put("compile", K1, _fill)
    record = entry.path / "entry.json"
    if damage == "truncate":
        record.write_bytes(record.read_bytes()[:10])
    elif damage == "garbage":
        record.write_bytes(b"\xff\xfe")
    else:
        record.unlink()
    assert store.lookup("compile", K1) is None
    assert warnings and not entry.path.exists()


def test_failed_fill_leaves_nothing(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)

    def boom(files: Path) -> dict[str, object]:
        (files / "partial").write_bytes(b"x")
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError):
        store.put("compile", K1, boom)
    assert store.lookup("compile", K1) is None
    assert list((tmp_path / "cache" / "compile").iterdir()) == []


def test_concurrent_writer_of_the_same_key(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)

    def racing(files: Path) -> dict[str, object]:
        meta = _fill(files)
        Store(tmp_path / "cache").put("compile", K1, _fill)  # another process wins the rename
        return meta

    entry = store.put("compile", K1, racing)
    assert store.lookup("compile", K1, full=True) is not None
    assert entry.path == tmp_path / "cache" / "compile" / K1


def test_temporaries_of_a_killed_build_are_removed(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    store.put("compile", K1, _fill)
    left = tmp_path / "cache" / "compile" / f".tmp-{K1}-123-abc"
    (left / "files").mkdir(parents=True)
    (tmp_path / "cache" / "results").mkdir()
    (tmp_path / "cache" / "results" / ".tmp-r.json-1-x").write_text("{")
    assert store.clean_temporaries() == 2
    assert not left.exists() and store.lookup("compile", K1) is not None


def test_results_roundtrip_and_corruption(tmp_path: Path) -> None:
    store, warnings = _store(tmp_path)
    store.save_record("results", C1, {"error": None, "kvcache_num_blocks": 21})
    assert store.load_record("results", C1) == {"error": None, "kvcache_num_blocks": 21}
    path = store.record_path("results", C1)
    path.write_text(path.read_text().replace("21", "22"))
    assert store.load_record("results", C1) is None and warnings and not path.exists()
    assert store.load_record("results", "f" * 64) is None


def test_write_atomic_and_link_atomic(tmp_path: Path) -> None:
    write_atomic(tmp_path / "d" / "f.json", b"one")
    write_atomic(tmp_path / "d" / "f.json", b"two")
    assert (tmp_path / "d" / "f.json").read_bytes() == b"two"
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["f.json"]
    (tmp_path / "t1").mkdir()
    (tmp_path / "t2").mkdir()
    link_atomic(tmp_path / "art" / "cell", "../t1")
    link_atomic(tmp_path / "art" / "cell", "../t2")
    assert os.readlink(tmp_path / "art" / "cell") == "../t2"
    (tmp_path / "art" / "cell").unlink()
    (tmp_path / "art" / "cell").mkdir()  # a real folder made by hand is the user's: named, never replaced
    (tmp_path / "art" / "cell" / "mine.txt").write_text("keep")
    with pytest.raises(BuildError, match="is not a link rbln-build made"):
        link_atomic(tmp_path / "art" / "cell", "../t1")
    assert (tmp_path / "art" / "cell" / "mine.txt").read_text() == "keep"


@pytest.mark.parametrize("key", ["../../victim", "k1", "A" * 64, "a" * 63, "a" * 64 + "/x", ""])
def test_keys_that_are_not_hex_digests_never_become_paths(tmp_path: Path, key: str) -> None:
    store, _ = _store(tmp_path)
    for call in (
        lambda: store.lookup("artifacts", key),
        lambda: store.load_record("results", key),
        lambda: store.entry_path("compile", key),
    ):
        with pytest.raises(ValueError, match="not a cache key"):
            call()


@pytest.mark.parametrize("damage", ["files", "files-keeping-mtime", "entry-json"])
def test_an_entry_looked_up_before_is_checked_again_after_a_change(tmp_path: Path, damage: str) -> None:
    """Store.lookup remembers an entry.json it checked (a sweep looks up a few hundred entries
    thousands of times); a change of the files or of entry.json after that lookup is still caught."""
    store, warnings = _store(tmp_path)
    entry = store.put("compile", K1, _fill)
    assert store.lookup("compile", K1) is not None and store.lookup("compile", K1) is not None  # remembered
    if damage.startswith("files"):
        victim = entry.files / "a.bin"
        st = victim.stat()
        victim.write_bytes(b"\x01" * 1000)
        if damage == "files-keeping-mtime":
            os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:
        record = json.loads((entry.path / "entry.json").read_text())
        record["meta"]["produced"] = "program"
        (entry.path / "entry.json").write_text(json.dumps(record))
    assert store.lookup("compile", K1) is None
    assert len(warnings) == 1 and str(entry.path) in warnings[0] and not entry.path.exists()


def test_a_record_is_canonical_json_and_its_fingerprint_is_returned(tmp_path: Path) -> None:
    from rbln_build.store import canonical_json, result_hash

    store, _ = _store(tmp_path)
    body = {"error": None, "kvcache_num_blocks": 21, "warnings": ["é"], "z": {"b": 1, "a": 2}}
    fingerprint = store.save_record("results", C1, body)
    path = store.record_path("results", C1)
    want = {"key": C1, "result": body, "content_hash": result_hash(body)}
    assert path.read_bytes() == canonical_json(want).encode("utf-8")
    st = path.stat()
    assert fingerprint == [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def test_a_record_write_that_fails_leaves_no_temporary_and_shared_names_carry_the_owner(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache", owner="b1")
    store.save_record("results", C1, {"n": 1})
    store.save_record("results", C1, {"n": 2})  # replaced whole
    assert store.load_record("results", C1) == {"n": 2}
    path = store.record_path("results", C1)
    path.unlink()
    path.mkdir()  # the rename cannot replace a folder: the write fails after its temporary was made
    with pytest.raises(OSError):
        store.save_record("results", C1, {"n": 3})
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no .tmp-* left behind
    path.rmdir()
    # a killed writer's temporary in a shared cache is the owner's: clean_temporaries takes only its own
    from rbln_build.store import _files

    left = path.parent / f".tmp-{path.name}-b1-{os.getpid()}-{_files._TOKEN.partition('-')[2]}ff"
    other = path.parent / f".tmp-{path.name}-b2-1-abcdef01"
    left.write_text("{")
    other.write_text("{")
    assert store.clean_temporaries() == 1 and not left.exists() and other.exists()


def test_a_name_missing_from_the_listing_that_is_there_after_all_is_still_checked(tmp_path: Path) -> None:
    """publish lists artifacts/ once and reads no link for a name the listing lacked; one that
    appears since (a user's link or folder) makes the symlink fail and is checked, never replaced."""
    from rbln_build.pipeline._links import _link
    from rbln_build.store import CellResult

    links = tmp_path / "artifacts"
    links.mkdir()
    os.symlink("../elsewhere", links / "mine")
    (links / "folder").mkdir()
    result = CellResult(C1, K1, artifact_key=K1)
    changes: list[str] = []
    warned: list[str] = []

    def changing() -> None:
        changes.append("change")

    with pytest.raises(BuildError, match="is a link rbln-build did not make"):
        _link(str(links), links, "mine", result, None, warned.append, changing, listed=False)
    with pytest.raises(BuildError, match="is not a link rbln-build made"):
        _link(str(links), links, "folder", result, None, warned.append, changing, listed=False)
    assert os.readlink(links / "mine") == "../elsewhere" and (links / "folder").is_dir()
    assert warned == []  # neither was a link of ours
    before = len(changes)
    _link(str(links), links, "new", result, None, warned.append, changing, listed=False)
    assert os.readlink(links / "new") == f"../cache/artifacts/{K1}/files"
    assert len(changes) == before + 1  # announced (.publishing written) before the new link was made
