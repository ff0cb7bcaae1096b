"""``rbln-build gc --remote MANIFEST...`` on a real S3 API server on 127.0.0.1 (moto's server mode):
it leaves exactly the pointers the given manifest references and the blobs they name; orphans and
stale temporaries go; ``--dry-run`` removes nothing; what stays still serves a build. Compile inputs
(``inputs/<sha256>``) older than ``--min-age`` go too, under their own heading; anything else in
``inputs/`` stays (fast test on a ``file://`` remote, in-process)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from test_cli import PLANS, check_ok, rbln, summary
from test_remote import s3  # noqa: F401  (the moto server fixture)

from rbln_build.commands._gc_remote import main as gc_remote
from rbln_build.execution._stages import artifact_key_of

URL = "s3://rbln-cache/gc"
BASE = "rbln-cache/gc"


def names(fs: Any, folder: str) -> set[str]:
    try:
        return {p.rsplit("/", 1)[-1] for p in fs.ls(f"{BASE}/{folder}", refresh=True)}
    except FileNotFoundError:
        return set()


@pytest.mark.integration
@pytest.mark.slow
def test_gc_remote_leaves_exactly_what_the_manifest_references(
    tmp_path: Path,
    s3: tuple[dict[str, str], Any, Any],  # noqa: F811
) -> None:
    env, fs, _ = s3
    full = rbln([*PLANS, "jobs=1", f"build_dir={tmp_path / 'full'}", f"cache.remote={URL}"], cwd=tmp_path, env=env)
    check_ok(full)
    part = tmp_path / "part"
    proc = rbln(
        [*PLANS, "device=rebel100", "jobs=1", f"build_dir={part}", f"cache.remote={URL}"], cwd=tmp_path, env=env
    )
    check_ok(proc)
    assert len(names(fs, "compile")) == 4 and summary(part)["compiled"] == 0
    orphan = "0" * 64
    fs.pipe_file(f"{BASE}/blobs/{orphan}", b"a blob no pointer names")
    fs.pipe_file(f"{BASE}/tmp/stale-upload", b"left by a killed upload")
    weights = "9" * 64
    fs.pipe_file(f"{BASE}/inputs/{weights}", b"a compile input")
    fs.pipe_file(f"{BASE}/inputs/readme", b"not ours")
    before = {k: names(fs, k) for k in ("compile", "artifacts", "blobs", "tmp", "inputs")}

    dry = rbln(["gc", "--remote", "--dry-run", "--min-age=0", str(part / "manifest.json"), f"cache.remote={URL}"],
               cwd=tmp_path, env=env)  # fmt: skip
    check_ok(dry)
    assert "would remove" in dry.stdout and "dry run: nothing removed" in dry.stdout
    assert f"would remove input     inputs/{weights}  (15 bytes)" in dry.stdout
    assert {k: names(fs, k) for k in before} == before

    young = rbln(["gc", "--remote", str(part / "manifest.json"), f"cache.remote={URL}"], cwd=tmp_path, env=env)
    check_ok(young)  # everything was written seconds ago: the default --min-age keeps it all
    assert "removed nothing" in young.stdout and {k: names(fs, k) for k in before} == before

    gc = rbln(["gc", "--remote", "--min-age=0", "--json", str(part / "manifest.json"), f"cache.remote={URL}"],
              cwd=tmp_path, env=env)  # fmt: skip
    check_ok(gc)
    report = json.loads(gc.stdout)
    cells = json.loads((part / "manifest.json").read_text())["cells"]
    compile_keys = {c["compile_key"] for c in cells.values()}
    artifact_keys = {
        artifact_key_of(c["compile_key"], c["inputs"]["npu"], c["kvcache_num_blocks"])
        for c in cells.values()
        if c["artifact"] is not None
    }
    assert names(fs, "compile") == compile_keys and len(compile_keys) == 2
    assert names(fs, "artifacts") == artifact_keys and artifact_keys
    pointed = {
        json.loads(fs.cat_file(f"{BASE}/{kind}/{key}"))["blob"]
        for kind, keys in (("compile", compile_keys), ("artifacts", artifact_keys))
        for key in keys
    }
    assert names(fs, "blobs") == pointed
    assert names(fs, "tmp") == set()
    assert names(fs, "inputs") == {"readme"}  # the old compile input went; the name that is not ours stayed
    assert report["inputs"]["removed"] == [{"path": f"inputs/{weights}", "bytes": 15}]
    assert "inputs/readme is not a name rbln-build makes; left alone" in report["notes"]
    removed = {r["path"] for r in report["removed"]}
    assert f"blobs/{orphan}" in removed and "tmp/stale-upload" in removed
    assert removed == {f"{k}/{n}" for k in ("compile", "artifacts", "blobs", "tmp") for n in before[k] - names(fs, k)}
    assert f"inputs/{weights}" not in removed  # listed under its own heading, not with the entries

    again = rbln([*PLANS, "device=rebel100", "jobs=1", f"build_dir={tmp_path / 'again'}", f"cache.remote={URL}"],
                 cwd=tmp_path, env=env)  # fmt: skip
    check_ok(again)  # what gc kept serves the referenced build whole
    assert summary(tmp_path / "again")["compiled"] == 0 and "corrupt" not in again.stderr
    assert (tmp_path / "again" / "manifest.json").read_bytes() == (part / "manifest.json").read_bytes()


@pytest.mark.integration
@pytest.mark.slow
def test_gc_remote_keeps_what_unmerged_shards_name_and_removes_merged_records(
    tmp_path: Path,
    s3: tuple[dict[str, str], Any, Any],  # noqa: F811
) -> None:
    """Between the shards and their merge, a gc given an older manifest (one that names half the keys)
    keeps the shards' records and every entry they name: the merge then finds them all. After the
    merge, gc given its manifest removes the merged records; what stays serves a build of the matrix.
    A record gc cannot read stops it before anything is removed."""
    env, fs, _ = s3
    remote = f"cache.remote={URL}"
    for i in (1, 2):
        check_ok(
            rbln([*PLANS, "jobs=1", f"build_dir={tmp_path / f's{i}'}", remote, f"shard={i}/2"], cwd=tmp_path, env=env)
        )
    # a manifest that holds no shard's every cell, whichever keys each shard got (the split follows the keys,
    # which follow the sources): one device and one budget, while every compile key serves two budgets
    part = tmp_path / "part"
    check_ok(
        rbln(
            [*PLANS, "device=rebel100", "matrix.budgets=[0.3]", "jobs=1", f"build_dir={part}", remote],
            cwd=tmp_path,
            env=env,
        )
    )
    before = {k: names(fs, k) for k in ("compile", "artifacts", "blobs", "shards")}
    assert len(before["compile"]) == 4 and len(before["shards"]) == 2

    def gc(manifest: Path) -> Any:
        return rbln(["gc", "--remote", "--min-age=0", str(manifest), remote], cwd=tmp_path, env=env)

    proc = gc(part / "manifest.json")  # rebel100 at 0.3 only: each shard has cells it does not hold
    check_ok(proc)
    assert "kept 2 unmerged shard record(s) and the entries they name" in proc.stdout
    assert {k: names(fs, k) for k in before} == before  # before this change: 2 compile pointers and more went

    merged = tmp_path / "merged"
    check_ok(rbln([*PLANS, f"build_dir={merged}", remote, "shard=merge/2"], cwd=tmp_path, env=env))
    proc = gc(merged / "manifest.json")
    check_ok(proc)
    assert names(fs, "shards") == set() and "removed shard" in proc.stdout  # merged: its manifest keeps the entries
    assert names(fs, "compile") == before["compile"] and names(fs, "artifacts") == before["artifacts"]
    again = tmp_path / "again"
    check_ok(rbln([*PLANS, "jobs=1", f"build_dir={again}", remote], cwd=tmp_path, env=env))
    assert summary(again)["compiled"] == 0
    assert (again / "manifest.json").read_bytes() == (merged / "manifest.json").read_bytes()

    fs.pipe_file(f"{BASE}/shards/{'e' * 64}.json.gz", b"not gzip")  # what it protects cannot be told
    fs.pipe_file(f"{BASE}/blobs/{'0' * 64}", b"an orphan")
    proc = gc(part / "manifest.json")
    check_ok(proc, 2)
    assert f"shards/{'e' * 64}.json.gz is not a shard's results" in proc.stderr and "nothing was removed" in proc.stderr
    assert "0" * 64 in names(fs, "blobs") and names(fs, "compile") == before["compile"]


@pytest.mark.integration
@pytest.mark.slow
def test_gc_remote_refuses_without_a_manifest(tmp_path: Path) -> None:
    proc = rbln(["gc", "--remote", f"cache.remote=file://{tmp_path / 'r'}"], cwd=tmp_path)
    check_ok(proc, 2)
    assert "give the manifests whose entries to keep" in proc.stderr and "Traceback" not in proc.stderr


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def test_gc_remote_removes_old_compile_inputs_and_nothing_else_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("fsspec", reason="fsspec is not installed: pip install 'rbln-build[remote]'")
    remote = tmp_path / "remote"
    key, blob, old_in, young_in = "1" * 64, "2" * 64, "3" * 64, "4" * 64
    files = {
        f"compile/{key}": json.dumps({"blob": blob}).encode(),
        f"blobs/{blob}": b"the referenced entry",
        f"inputs/{old_in}": b"weights a build uploaded two hours ago",
        f"inputs/{young_in}": b"weights a running build uploaded just now",
        "inputs/notes.txt": b"someone else's file",
        f"inputs/{'A' * 64}": b"upper case: not a name publish_input makes",
        f"inputs/{'5' * 64}/inside": b"a folder named like a digest",
    }
    for rel, data in files.items():
        (remote / rel).parent.mkdir(parents=True, exist_ok=True)
        (remote / rel).write_bytes(data)
    two_hours_ago = time.time() - 7200
    for rel in files:
        if rel != f"inputs/{young_in}":
            os.utime(remote / rel, (two_hours_ago, two_hours_ago))
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"cells": {"c": {"compile_key": key, "artifact": None}}}))
    monkeypatch.chdir(tmp_path)
    args = [str(manifest), f"cache.remote=file://{remote}"]
    before = _tree(remote)

    assert gc_remote(["--dry-run", *args]) == 0
    out, err = capsys.readouterr()
    assert _tree(remote) == before
    assert f"would remove input     inputs/{old_in}  (38 bytes)" in out
    assert "would remove 1 input: 38 bytes (dry run: nothing removed); kept 1 younger than 3600s." in out
    assert "would remove nothing: 0 bytes" in out  # the entries: the manifest references both
    assert "note: inputs/notes.txt is not a name rbln-build makes; left alone" in err
    assert f"note: inputs/{'A' * 64} is not a name rbln-build makes; left alone" in err
    assert f"note: inputs/{'5' * 64} is a folder; left alone" in err

    assert gc_remote(["--json", *args]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"] == {"bytes": 38, "young": 1, "removed": [{"path": f"inputs/{old_in}", "bytes": 38}]}
    assert report["removed"] == [] and report["bytes"] == 38
    assert report["kept"] == {"compile": 1, "artifacts": 0, "blobs": 1}
    assert _tree(remote) == {k: v for k, v in before.items() if k != f"inputs/{old_in}"}

    assert gc_remote(["--min-age=0", *args]) == 0  # no build running: every compile input goes
    assert f"removed input     inputs/{young_in}" in capsys.readouterr().out
    assert _tree(remote) == {k: v for k, v in before.items() if k not in (f"inputs/{old_in}", f"inputs/{young_in}")}
