"""``release`` from a merge's build dir (``shard=merge/N``: a manifest, no programs): each cell is copied
from the remote cache, verified, to a folder or a URL. Against moto's S3 server on 127.0.0.1: the
release is byte-identical to the one a full build dir of the same cells gives, published remote to
remote; a cell whose entry the remote lacks is named with its key, exit 1, nothing published."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_cli import PLANS, check_ok, rbln
from test_remote import s3, seeded  # noqa: F401  (moto's S3 server on 127.0.0.1; a build that filled a file:// remote)

pytest.importorskip(
    "fsspec",
    reason="fsspec is not installed: the remote cache needs the remote extra (pip install 'rbln-build[remote]')",
)
pytestmark = pytest.mark.integration

CACHE = "s3://rbln-cache/rel/cache"
RELEASES = "s3://rbln-cache/rel/releases"


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _s3_files(fs: Any, root: str) -> dict[str, bytes]:
    fs.invalidate_cache()
    return {p[len(root) + 1 :]: bytes(fs.cat_file(p)) for p in sorted(fs.find(root))}


def test_a_build_dir_holding_only_the_manifest_releases_from_a_file_remote(
    seeded: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """What a merge leaves (its manifest is a full build's, byte for byte: tests/test_shard.py), released
    from a file:// remote: the same files as the full build dir's release, and nothing left behind."""
    import shutil

    full, seed = seeded
    merged = tmp_path / "merged"
    merged.mkdir()
    shutil.copyfile(full / "manifest.json", merged / "manifest.json")
    to = tmp_path / "releases"
    args = ["release", "r1", "--to", str(to), "--json"]
    check_ok(rbln([*args, "--build-dir", str(full), "--cells", "*.b0.3"], cwd=tmp_path))
    expected = _files(to / "r1")
    shutil.rmtree(to)
    proc = rbln([*args, "--build-dir", str(merged), "--cells", "*.b0.3", f"cache.remote=file://{seed}"], cwd=tmp_path)
    check_ok(proc)
    assert json.loads(proc.stdout)["from_remote"] == len(json.loads(proc.stdout)["cells"]) > 0
    assert _files(to / "r1") == expected
    assert sorted(p.name for p in merged.iterdir()) == [".lock", "manifest.json"]  # the lock; no cache, no links


def test_a_build_dir_that_lost_a_link_is_never_filled_from_the_remote_unasked(
    seeded: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """A full build dir with one artifact link deleted: without cache.remote on the command line the
    release stops (exit 2) naming the cell, even where a config sets a remote; given it on purpose, the
    release takes that cell from the remote and names it on stderr (also with --json)."""
    import shutil

    full, seed = seeded
    damaged = tmp_path / "damaged"
    shutil.copytree(full, damaged, symlinks=True)
    lost = sorted(p.name for p in (damaged / "artifacts").iterdir())[0]
    (damaged / "artifacts" / lost).unlink()
    args = ["release", "r1", "--build-dir", str(damaged), "--to", str(tmp_path / "rel")]
    proc = rbln(args, cwd=tmp_path)
    check_ok(proc, 2)
    assert f"1 selected cell of {damaged} has lost its artifact link ({lost}) while 6 have one" in proc.stderr
    assert "cache.remote=URL" in proc.stderr and not (tmp_path / "rel" / "r1").exists()
    proc = rbln([*args, "--json", f"cache.remote=file://{seed}"], cwd=tmp_path)
    check_ok(proc)
    assert json.loads(proc.stdout)["from_remote"] == 1
    assert proc.stderr.strip().splitlines() == [
        f"rbln-build release: 1 cell without an artifact link in {damaged} came from the remote cache "
        f"file://{seed}: {lost}"
    ]


@pytest.mark.slow  # about 22 s on 2 shared cores: a build, a merge, four releases against S3
def test_a_merge_build_dir_releases_from_the_remote_byte_identical_to_a_full_build_dir(
    tmp_path: Path,
    s3: tuple[dict[str, str], Any, Any],  # noqa: F811
) -> None:
    env, fs, _ = s3
    remote = f"cache.remote={CACHE}"
    full, merged = tmp_path / "full", tmp_path / "merged"
    check_ok(rbln([*PLANS, "jobs=1", f"build_dir={full}", remote, "shard=1/1"], cwd=tmp_path, env=env))
    proc = rbln([*PLANS, f"build_dir={merged}", remote, "shard=merge/1"], cwd=tmp_path, env=env)
    check_ok(proc)
    assert (merged / "manifest.json").read_bytes() == (full / "manifest.json").read_bytes()
    assert not (merged / "artifacts").exists() and not (merged / "cache" / "artifacts").exists()

    def release(build: Path, to: str, *extra: str, name: str = "r1") -> Any:
        args = ["release", name, "--build-dir", str(build), "--to", to, "--json", *extra]
        return rbln(args, cwd=tmp_path, env=env)

    proc = release(full, str(tmp_path / "from-full"))
    check_ok(proc)
    expected = _files(tmp_path / "from-full" / "r1")
    cells = json.loads(proc.stdout)["cells"]
    assert len(cells) == 7 and json.loads(proc.stdout)["from_remote"] == 0

    # without the remote, the merge's build dir cannot be released: said in one line, nothing written
    proc = release(merged, str(tmp_path / "nowhere"))
    check_ok(proc, 2)
    assert "have no artifact link" in proc.stderr and "cache.remote=URL" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "nowhere" / "r1").exists()

    proc = release(merged, RELEASES, remote)  # remote to remote: S3 cache -> S3 release
    check_ok(proc)
    assert json.loads(proc.stdout)["from_remote"] == 7 and json.loads(proc.stdout)["cells"] == cells
    assert _s3_files(fs, RELEASES[5:] + "/r1") == expected
    proc = release(merged, str(tmp_path / "from-merge"), remote)  # to a local folder
    check_ok(proc)
    assert _files(tmp_path / "from-merge" / "r1") == expected
    proc = rbln(["verify", f"{RELEASES}/r1"], cwd=tmp_path, env=env)
    check_ok(proc)
    assert not (merged / "artifacts").exists() and not (merged / "cache" / "artifacts").exists()  # nothing left

    from rbln_build.pipeline import artifact_key_of

    def key_of(cid: str) -> str:
        record = json.loads((merged / "manifest.json").read_text())["cells"][cid]
        return artifact_key_of(record["compile_key"], record["inputs"]["npu"], record["kvcache_num_blocks"])

    # a flipped byte in an artifact's blob: refused by its sha256 on the way, exit 1, nothing published
    blob = f"{CACHE[5:]}/blobs/" + json.loads(fs.cat_file(f"{CACHE[5:]}/artifacts/{key_of(cells[-1])}"))["blob"]
    data = bytes(fs.cat_file(blob))
    fs.pipe_file(blob, data[:100] + bytes([data[100] ^ 1]) + data[101:])
    proc = release(merged, RELEASES, remote, name="r2")
    check_ok(proc, 1)
    assert f"cell {cells[-1]!r}: artifact {key_of(cells[-1])} is not usable" in proc.stderr
    assert "is corrupt (sha256 " in proc.stderr and "Traceback" not in proc.stderr
    # an artifact the remote lacks: the cell and its key named in one line, exit 1, nothing published
    fs.rm_file(f"{CACHE[5:]}/artifacts/{key_of(cells[0])}")
    proc = release(merged, RELEASES, remote, name="r2")
    check_ok(proc, 1)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cell {cells[0]!r}: artifact {key_of(cells[0])} is not usable" in lines[0]
    assert "(no such entry); nothing was published" in lines[0] and "Traceback" not in proc.stderr
    fs.invalidate_cache()
    assert not fs.exists(RELEASES[5:] + "/r2") and not fs.find(RELEASES[5:] + "/.tmp-release")
