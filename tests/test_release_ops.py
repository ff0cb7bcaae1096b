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
    return rbln(["gc", "--json", "--dry-run", *PLANS, "matrix.budgets=[0.3]", f"build_dir={work / 'build'}", *extra], cwd=work)


@pytest.mark.parametrize("given", ["release.json", "folder"])
def test_gc_keeps_everything_a_release_references(plans: Path, tmp_path: Path, given: str) -> None:
    work = copy(plans, tmp_path)
    (work / "build" / "manifest.json").unlink()  # only the release and the matrix speak for the cells
    released = work / "build" / "releases" / "v1"
    body = json.loads((released / "release.json").read_text())
    as_manifest = tmp_path / "records.json"  # the released cells' manifest records, as a manifest
    as_manifest.write_text(json.dumps({"cells": {c: e["record"] for c, e in body["cells"].items()}}))
    removed = {}
    for name, extra in [("none", []), ("manifest", ["--keep", str(as_manifest)]), ("release", ["--keep", str(
        released / "release.json" if given == "release.json" else released)])]:
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
