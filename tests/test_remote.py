"""cache.remote: a shared cache behind the build directory's, on a directory (file://) and on a real S3
API server on 127.0.0.1 (moto's server mode through s3fs). Real CLI runs over matrix=plans (4
compile keys): a second build dir compiles nothing; a flipped or truncated remote entry is reported,
rebuilt and re-uploaded; an unreachable remote warns once (or fails with cache.require_remote)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_cli import PLANS, check_ok, rbln, summary

pytest.importorskip(
    "fsspec",
    reason="fsspec is not installed: the remote cache needs the remote extra (pip install 'rbln-build[remote]')",
)


def build(
    tmp_path: Path, name: str, remote: str, *extra: str, env: dict[str, str] | None = None
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path / name
    proc = rbln([*PLANS, "jobs=1", f"build_dir={out}", f"cache.remote={remote}", *extra], cwd=tmp_path, env=env)
    return out, proc


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One build that filled a file:// remote: (its build dir, the remote folder). Tests copy the remote."""
    work = tmp_path_factory.mktemp("seed")
    out, proc = build(work, "build", f"file://{work / 'remote'}")
    check_ok(proc)
    assert summary(out)["compiled"] == 4
    assert len(list((work / "remote" / "compile").iterdir())) == 4
    return out, work / "remote"


def flip(data: bytes, how: str) -> bytes:
    if how == "truncate":
        return data[: len(data) // 2]
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :]


def test_a_second_build_dir_compiles_nothing(seeded: tuple[Path, Path], tmp_path: Path) -> None:
    first, seed = seeded
    remote = tmp_path / "remote"
    shutil.copytree(seed, remote)
    out = tmp_path / "second"
    proc = rbln([*PLANS, "jobs=2", f"build_dir={out}", f"cache.remote=file://{remote}"], cwd=tmp_path)  # workers too
    check_ok(proc)
    assert summary(out)["compiled"] == 0
    assert "warning" not in proc.stderr and ": plan (" not in proc.stderr
    assert (out / "manifest.json").read_bytes() == (first / "manifest.json").read_bytes()


@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_a_damaged_remote_entry_is_reported_rebuilt_and_uploaded_again(
    seeded: tuple[Path, Path], tmp_path: Path, how: str
) -> None:
    first, seed = seeded
    remote = tmp_path / "remote"
    shutil.copytree(seed, remote)
    pointer = sorted((remote / "compile").iterdir())[0]
    blob = remote / "blobs" / json.loads(pointer.read_text())["blob"]
    blob.write_bytes(flip(blob.read_bytes(), how))
    out, proc = build(tmp_path, "damaged", f"file://{remote}")
    check_ok(proc)
    # a truncated blob is caught by its size, before it is downloaded (the pointer records it); a flipped byte by its sha256
    why = "its blob is not the" if how == "truncate" else "sha256 "
    assert f"remote cache entry file://{remote}/compile/{pointer.name} is corrupt ({why}" in proc.stderr
    assert summary(out)["compiled"] == 1  # that key alone, rebuilt
    assert (out / "manifest.json").read_bytes() == (first / "manifest.json").read_bytes()
    repaired = json.loads(pointer.read_text())["blob"]
    assert (remote / "blobs" / repaired).is_file()
    out, proc = build(tmp_path, "after", f"file://{remote}")  # the re-uploaded entry serves the next build
    check_ok(proc)
    assert summary(out)["compiled"] == 0 and "corrupt" not in proc.stderr


def test_two_build_dirs_compiling_at_once_leave_one_consistent_entry_per_key(tmp_path: Path) -> None:
    remote = f"file://{tmp_path / 'remote'}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rbln_build.cli",
                *PLANS,
                "jobs=1",
                f"build_dir={tmp_path / n}",
                f"cache.remote={remote}",
            ],
            cwd=tmp_path,
            env=dict(os.environ, HF_HUB_OFFLINE="1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in ("a", "b")
    ]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    assert (tmp_path / "a" / "manifest.json").read_bytes() == (tmp_path / "b" / "manifest.json").read_bytes()
    pointers = sorted((tmp_path / "remote" / "compile").iterdir())
    assert len(pointers) == 4
    assert not list((tmp_path / "remote" / "tmp").iterdir())  # every upload was published or dropped
    out, proc = build(tmp_path, "c", remote)  # each published entry verifies and serves a third build
    check_ok(proc)
    assert summary(out)["compiled"] == 0 and "corrupt" not in proc.stderr


# -- S3: a real S3 API server on 127.0.0.1 ---------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[tuple[dict[str, str], Any, Any]]:
    """moto's S3 server on 127.0.0.1 with a bucket; (the environment a build needs, s3fs, the server)."""
    pytest.importorskip(
        "s3fs", reason="s3fs is not installed: an S3 remote needs the remote extra (pip install 'rbln-build[remote]')"
    )
    server_mod = pytest.importorskip(
        "moto.server",
        reason="moto is not installed: the S3 server the tests start needs the scale-test extra (pip install 'rbln-build[scale-test]')",
    )
    port = _free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    if not fs.exists("rbln-cache"):  # moto keeps its buckets per process, across servers
        fs.mkdir("rbln-cache")
    try:
        yield env, fs, server
    finally:
        try:
            server.stop()
        except Exception:
            pass  # a test stopped it already
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.slow
def test_s3_second_build_compiles_nothing_and_a_flipped_byte_is_repaired(
    seeded: tuple[Path, Path], tmp_path: Path, s3: tuple[dict[str, str], Any, Any]
) -> None:
    env, fs, _ = s3
    first, _seed = seeded
    url = "s3://rbln-cache/team/cache"
    out, proc = build(tmp_path, "one", url, env=env)
    check_ok(proc)
    assert summary(out)["compiled"] == 4 and "warning" not in proc.stderr
    assert len(fs.ls("rbln-cache/team/cache/compile")) == 4
    out, proc = build(tmp_path, "two", url, env=env)
    check_ok(proc)
    assert summary(out)["compiled"] == 0
    assert (out / "manifest.json").read_bytes() == (first / "manifest.json").read_bytes()
    pointer = sorted(fs.ls("rbln-cache/team/cache/compile"))[0]
    blob = "rbln-cache/team/cache/blobs/" + json.loads(fs.cat_file(pointer))["blob"]
    fs.pipe_file(blob, flip(fs.cat_file(blob), "flip"))
    out, proc = build(tmp_path, "three", url, env=env)
    check_ok(proc)
    assert "is corrupt (sha256 " in proc.stderr and summary(out)["compiled"] == 1
    assert (out / "manifest.json").read_bytes() == (first / "manifest.json").read_bytes()
    out, proc = build(tmp_path, "four", url, env=env)
    check_ok(proc)
    assert summary(out)["compiled"] == 0 and "corrupt" not in proc.stderr


@pytest.mark.slow
def test_a_stopped_s3_server_warns_once_and_builds_locally_or_fails_if_required(
    tmp_path: Path, s3: tuple[dict[str, str], Any, Any]
) -> None:
    env, _, server = s3
    server.stop()
    out, proc = build(tmp_path, "local", "s3://rbln-cache/x", env=env)
    check_ok(proc)
    assert proc.stderr.count("cache.remote: s3://rbln-cache/x cannot be reached") == 1
    assert summary(out)["compiled"] == 4
    assert summary(out)["warnings"] and "AWS_SECRET" not in proc.stderr and "testing" not in proc.stderr
    off = [w for w in summary(out)["warnings"] if "was off for this run" in w]  # what it left behind, counted
    assert len(off) == 1 and re.search(r"; (\d+) of \1 cache entries this build uses are not on it", off[0])
    out, proc = build(tmp_path, "required", "s3://rbln-cache/x", "cache.require_remote=true", env=env)
    check_ok(proc, 2)
    assert "cache.require_remote=true stops the build" in proc.stderr and "Traceback" not in proc.stderr
    assert not (out / "manifest.json").exists()
