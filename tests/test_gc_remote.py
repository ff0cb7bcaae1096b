"""``rbln-build gc --remote MANIFEST...`` on a real S3 API server on 127.0.0.1 (moto's server mode):
it leaves exactly the pointers the given manifest references and the blobs they name; orphans and
stale temporaries go; ``--dry-run`` removes nothing; what stays still serves a build."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_cli import PLANS, check_ok, rbln, summary
from test_remote import s3  # noqa: F401  (the moto server fixture)

from rbln_build.execution._stages import artifact_key_of

pytestmark = [pytest.mark.integration, pytest.mark.slow]
URL = "s3://rbln-cache/gc"
BASE = "rbln-cache/gc"


def names(fs: Any, folder: str) -> set[str]:
    try:
        return {p.rsplit("/", 1)[-1] for p in fs.ls(f"{BASE}/{folder}", refresh=True)}
    except FileNotFoundError:
        return set()


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
    before = {k: names(fs, k) for k in ("compile", "artifacts", "blobs", "tmp")}

    dry = rbln(["gc", "--remote", "--dry-run", "--min-age=0", str(part / "manifest.json"), f"cache.remote={URL}"],
               cwd=tmp_path, env=env)  # fmt: skip
    check_ok(dry)
    assert "would remove" in dry.stdout and "dry run: nothing removed" in dry.stdout
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
    removed = {r["path"] for r in report["removed"]}
    assert f"blobs/{orphan}" in removed and "tmp/stale-upload" in removed
    assert removed == {f"{k}/{n}" for k in ("compile", "artifacts", "blobs", "tmp") for n in before[k] - names(fs, k)}

    again = rbln([*PLANS, "device=rebel100", "jobs=1", f"build_dir={tmp_path / 'again'}", f"cache.remote={URL}"],
                 cwd=tmp_path, env=env)  # fmt: skip
    check_ok(again)  # what gc kept serves the referenced build whole
    assert summary(tmp_path / "again")["compiled"] == 0 and "corrupt" not in again.stderr
    assert (tmp_path / "again" / "manifest.json").read_bytes() == (part / "manifest.json").read_bytes()


def test_gc_remote_refuses_without_a_manifest(tmp_path: Path) -> None:
    proc = rbln(["gc", "--remote", f"cache.remote=file://{tmp_path / 'r'}"], cwd=tmp_path)
    check_ok(proc, 2)
    assert "give the manifests whose entries to keep" in proc.stderr and "Traceback" not in proc.stderr
