"""A release engineer's operations on a release (issue 36, item 7): ``gc`` takes a release as what
it is, ``serve-command`` verifies a released cell as ``run`` does, releasing over a damaged release
says so, and destination errors are one line. Real builds of matrix=plans through the real CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_cli import PLANS, check_ok, rbln

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One clean build of matrix=plans released as v1 (its folder holds build/); tests copy it."""
    work = tmp_path_factory.mktemp("plans")
    check_ok(rbln([*PLANS, f"build_dir={work / 'build'}"], cwd=work))
    check_ok(rbln(["release", "v1", "--build-dir", str(work / "build")], cwd=work))
    return work


def copy(plans: Path, tmp_path: Path) -> Path:
    shutil.copytree(plans / "build", tmp_path / "build", symlinks=True)
    return tmp_path


def gc(work: Path, *extra: str) -> Any:
    # a narrower matrix than the build's: every cell but the 0.3 budget's is the release's alone
    return rbln(
        ["gc", "--json", "--dry-run", *PLANS, "matrix.budgets=[0.3]", f"build_dir={work / 'build'}", *extra], cwd=work
    )


@pytest.mark.parametrize("given", ["release.json", "folder"])
def test_gc_keeps_everything_a_release_references(plans: Path, tmp_path: Path, given: str) -> None:
    work = copy(plans, tmp_path)
    (work / "build" / "manifest.json").unlink()  # only the release and the matrix speak for the cells
    released = work / "build" / "releases" / "v1"
    body = json.loads((released / "release.json").read_text())
    as_manifest = tmp_path / "records.json"  # the released cells' manifest records, as a manifest
    as_manifest.write_text(json.dumps({"cells": {c: e["record"] for c, e in body["cells"].items()}}))
    removed = {}
    for name, extra in [
        ("none", []),
        ("manifest", ["--keep", str(as_manifest)]),
        ("release", ["--keep", str(released / "release.json" if given == "release.json" else released)]),
    ]:
        proc = gc(work, *extra)
        check_ok(proc)
        removed[name] = {r["path"] for r in json.loads(proc.stdout)["removed"]}
    assert removed["manifest"] < removed["none"]  # the released cells' entries would go without a --keep
    assert removed["release"] == removed["manifest"]  # their links, compile entries, records and artifacts stay


def test_gc_refuses_a_damaged_release_in_one_line(plans: Path, tmp_path: Path) -> None:
    work = copy(plans, tmp_path)
    path = work / "build" / "releases" / "v1" / "release.json"
    body = json.loads(path.read_text())
    body["cells"].popitem()  # fewer cells than it was hashed with: gc would keep too little
    path.write_text(json.dumps(body))
    proc = gc(work, "--keep", str(path))
    check_ok(proc, 2)
    assert "a damaged release" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


CELL = "qwen3_8b.rebel100.b0.3"


def _release(work: Path, name: str, *extra: str) -> Any:
    return rbln(["release", name, "--build-dir", str(work / "build"), *extra], cwd=work)


def _one_line(proc: Any, code: int, says: str) -> None:
    check_ok(proc, code)
    assert says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_serve_command_verifies_a_released_cell_as_run_does(plans: Path, tmp_path: Path) -> None:
    work = copy(plans, tmp_path)
    cell = work / "build" / "releases" / "v1" / CELL
    check_ok(rbln(["serve-command", str(cell)], cwd=work))
    record = json.loads((cell / "rbln-build.json").read_text())
    record["serving_note"] = "hand-edited"  # a file release.json lists, changed after the release
    (cell / "rbln-build.json").write_text(json.dumps(record))
    proc = rbln(["serve-command", str(cell)], cwd=work)
    check_ok(proc, 2)  # as run refuses it (IntegrityError)
    assert f"{cell}/rbln-build.json: changed:" in proc.stderr and "does not match" in proc.stderr
    assert "Traceback" not in proc.stderr and not proc.stdout


def test_run_of_a_mistyped_cell_under_a_release_names_the_close_ones(plans: Path, tmp_path: Path) -> None:
    work = copy(plans, tmp_path)
    typo = work / "build" / "releases" / "v1" / CELL.replace("rebel100", "rebel10")
    proc = rbln_run([str(typo), "--prompt-ids", "1"], work)
    _one_line(proc, 2, f"{typo}: no such cell in the release")
    assert (
        f"did you mean {CELL}" in proc.stderr and "damaged" not in proc.stderr and "does not match" not in proc.stderr
    )
    proc = rbln(["serve-command", str(typo)], cwd=work)  # serve-command names them too
    _one_line(proc, 2, f"{typo}: no such cell in the release")
    assert f"did you mean {CELL}" in proc.stderr and not proc.stdout


def test_run_of_a_path_through_a_file_is_a_one_line_usage_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    proc = rbln_run([str(tmp_path / "afile" / "x"), "--prompt-ids", "1"], tmp_path)
    _one_line(proc, 2, "afile/x: not a cell folder (a part of it is a file)")


def rbln_run(args: list[str], cwd: Path) -> Any:
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "rbln_build.run", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_releasing_again_over_a_damaged_release_says_it_is_damaged(plans: Path, tmp_path: Path) -> None:
    work = copy(plans, tmp_path)
    readme = work / "build" / "releases" / "v1" / CELL / "README.md"
    readme.write_text(readme.read_text() + "tampered\n")
    proc = _release(work, "v1")
    _one_line(proc, 1, "already holds this release, but it is damaged")
    assert f"{CELL}/README.md: changed" in proc.stderr and "unchanged" not in proc.stdout


def test_an_empty_destination_is_refused_not_taken_as_the_current_folder(plans: Path, tmp_path: Path) -> None:
    work = copy(plans, tmp_path)
    proc = _release(work, "v2", "--to", "")  # `--to "$DEST"` with DEST unset
    _one_line(proc, 2, "--to '': empty")
    assert not (work / "v2").exists()


@pytest.mark.parametrize("to", [pytest.param("/proc", id="proc"), pytest.param("/dev/null", id="a-device")])
def test_a_destination_that_cannot_be_written_is_one_line(plans: Path, tmp_path: Path, to: str) -> None:
    work = copy(plans, tmp_path)
    proc = _release(work, "v2", "--to", to)
    _one_line(proc, 2, f"--to {to}")
    assert "Choose a writable folder with --to DIR" in proc.stderr or "choose a writable one" in proc.stderr


def test_a_bad_signing_key_is_refused_before_releases_is_made(plans: Path, tmp_path: Path) -> None:
    work = copy(plans, tmp_path)
    shutil.rmtree(work / "build" / "releases")
    proc = _release(work, "v2", "--sign", str(tmp_path / "no-such.key"))
    _one_line(proc, 2, "no-such.key")
    assert not (work / "build" / "releases").exists()


def _rewrite(path: Path, text: str) -> None:
    """release.json as given, with a content_sha256 recomputed over its parsed body (what an
    editor who knows the self-hash but has no key can make)."""
    from rbln_build.release._format import SELF_HASH_KEY, self_hash

    body = json.loads(text)
    path.write_text(text.replace(body[SELF_HASH_KEY], self_hash(body)))


def test_verify_checks_the_bytes_it_hashes_and_the_name_rule(plans: Path, tmp_path: Path) -> None:
    root = tmp_path / "v1"
    shutil.copytree(plans / "build" / "releases" / "v1", root)
    text = (root / "release.json").read_text()
    check_ok(rbln(["verify", str(root)], cwd=tmp_path))
    # a duplicate key: the parsed body (the last one wins) hashes as the original did
    _rewrite(root / "release.json", text.replace('{\n "cells"', '{\n "name": "v0",\n "cells"', 1))
    proc = rbln(["verify", str(root)], cwd=tmp_path)
    check_ok(proc, 1)
    assert "release.json: edited: its bytes are not the rendering" in proc.stderr
    from rbln_build.release._format import render_release

    body = json.loads(text)
    body["cells"]["-bad id"] = body["cells"][CELL]  # outside the name rule, in a well-rendered file
    (root / "release.json").write_bytes(render_release(body))
    proc = rbln(["verify", str(root)], cwd=tmp_path)
    check_ok(proc, 1)
    assert "cell id '-bad id' is not a safe folder name" in proc.stderr


def test_a_url_release_cleans_the_uploads_a_killed_one_left(plans: Path, tmp_path: Path) -> None:
    pytest.importorskip("fsspec", reason="the remote extra: pip install 'rbln-build[remote]'")
    import os
    import uuid

    work = copy(plans, tmp_path)
    remote = tmp_path / "remote"
    stale = remote / ".tmp-release" / f"v0-{uuid.uuid4().hex}"
    young = remote / ".tmp-release" / f"v0-{uuid.uuid4().hex}"  # a release uploading now: left alone
    for folder in (stale, young):
        (folder / CELL).mkdir(parents=True)
        (folder / CELL / "config.json").write_text("{}")
    os.utime(stale / CELL / "config.json", (1, 1))
    check_ok(_release(work, "u1", "--to", f"file://{remote}"))
    assert not stale.exists() and young.is_dir()
    check_ok(rbln(["verify", f"file://{remote}/u1"], cwd=work))


@pytest.mark.parametrize(
    "to",
    [
        pytest.param("s3://bucket/releases", id="unreachable-endpoint"),
        pytest.param("s3://AKIAMARKER:SECRETMARKER@bucket/releases", id="credentials-in-the-url"),
    ],
)
def test_a_destination_that_does_not_answer_is_one_line_without_the_secret(
    plans: Path, tmp_path: Path, to: str
) -> None:
    """Issue 36: the first look at an s3:// destination (does it hold this release?) was outside the
    upload's error handling: an endpoint that refuses connections, or a bucket name that is not one
    (credentials written into the URL), was an internal error (exit 3) whose traceback file held the
    secret. Now one line (exit 1, as a failed upload), with no secret anywhere."""
    pytest.importorskip("s3fs", reason="the remote extra: pip install 'rbln-build[remote]'")
    import socket

    with socket.socket() as s:  # a port on 127.0.0.1 that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work = copy(plans, tmp_path)
    errors = tmp_path / "tmp"
    errors.mkdir()
    env = {
        "AWS_ACCESS_KEY_ID": "AKIAMARKER",
        "AWS_SECRET_ACCESS_KEY": "SECRETMARKER",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "TMPDIR": str(errors),  # where an internal error's traceback file would go (no build dir's logs/)
    }
    proc = rbln(["release", "v2", "--build-dir", str(work / "build"), "--to", to], cwd=work, env=env)
    _one_line(proc, 1, "release v2: reading s3://bucket/releases/v2 failed (")
    assert "Check the URL and the credentials" in proc.stderr and "SECRETMARKER" not in proc.stderr
    assert not [p for p in errors.rglob("*") if p.is_file()]
    assert not [p for p in (work / "build").rglob("*") if p.is_file() and b"SECRETMARKER" in p.read_bytes()]
