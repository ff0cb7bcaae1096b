"""The no-op short cut (rbln_build.commands._noop), through the real CLI on a small project of
plans: after a no-op, an unchanged build (and ``status``) answers exactly as the full path does
without importing Hydra; any changed input or damaged output sends it back to the full path, which
repairs what it must and decides with doit as always."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

MATRIX = "models: [llama3_2_1b]\ndevices: [rebel100]\nbudgets: [0.3, 0.5]\n"
# runs the real CLI, then says whether Hydra was imported (the full path composes; the short cut does not)
RUNNER = """
import sys
out = sys.argv[1]
sys.argv = ["rbln-build", *sys.argv[2:]]
try:
    from rbln_build.cli import main
    main()
finally:
    open(out, "w").write("full" if "hydra" in sys.modules else "short")
"""
TIME = re.compile(r"\(\d+\.\ds\)\. Manifest")


class Run:
    def __init__(self, proc: subprocess.CompletedProcess[str], path: str) -> None:
        self.code, self.stdout, self.stderr, self.path = proc.returncode, proc.stdout, proc.stderr, path

    def same_answer(self, other: Run) -> bool:
        strip = lambda text: TIME.sub("(T). Manifest", text)  # noqa: E731
        return (self.code, strip(self.stdout), self.stderr) == (other.code, strip(other.stdout), other.stderr)


def cli(root: Path, *args: str) -> Run:
    marker = root.parent / "path.txt"
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(marker), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    return Run(proc, marker.read_text())


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project built once (its build dir is copied by each test); its files older than RACY_NS."""
    from rbln_build.commands._noop import RACY_NS

    root = tmp_path_factory.mktemp("noop") / "proj"
    (root / "conf" / "matrix").mkdir(parents=True)
    (root / "rbln-build.yaml").write_text("# a project\n")
    (root / "conf" / "matrix" / "default.yaml").write_text(MATRIX)
    made = time.time()
    built = cli(root, "progress=false")
    assert built.code == 0, built.stderr
    shutil.rmtree(root / "build" / ".noop", ignore_errors=True)
    time.sleep(max(0.0, RACY_NS / 1e9 + 0.2 - (time.time() - made)))  # inputs this fresh are never stamped
    return root


@pytest.fixture
def project(template: Path, tmp_path: Path) -> Path:
    """The template project's own files, and a copy of its build dir for this test."""
    root = tmp_path / "proj"
    root.mkdir()
    for name in ("rbln-build.yaml", "conf"):
        os.symlink(template / name, root / name)
    shutil.copytree(template / "build", root / "build", symlinks=True)
    return root


def armed(root: Path) -> list[Path]:
    return sorted((root / "build" / ".noop").glob("*.json"))


def noop_pair(root: Path, *args: str) -> tuple[Run, Run]:
    """A full no-op (it records the stamp), then the short cut."""
    full = cli(root, "progress=false", *args)
    assert full.path == "full" and armed(root), full.stderr
    short = cli(root, "progress=false", *args)
    assert short.path == "short"
    return full, short


def test_the_short_cut_answers_as_the_full_path(project: Path) -> None:
    status_full = cli(project, "status", "progress=false")
    json_full = cli(project, "status", "progress=false", "--json")
    full, short = noop_pair(project)
    assert short.same_answer(full)
    assert "2 cells: 0 compiled, 0 finalized, 2 skipped" in short.stdout
    outputs = {n: (project / "build" / n).stat() for n in ("manifest.json", "summary.json", "results.txt")}
    again = cli(project, "progress=false")
    assert again.path == "short" and again.same_answer(full)
    assert {n: (project / "build" / n).stat() for n in outputs} == outputs  # the short cut writes nothing
    for args, expected in (
        (("status", "progress=false"), status_full),
        (("status", "progress=false", "--json"), json_full),
    ):
        status = cli(project, *args)
        assert status.path == "short"
        assert (status.code, status.stdout, status.stderr) == (expected.code, expected.stdout, expected.stderr)
    # another invocation (an override, --full-table) has its own stamp, or none yet
    assert cli(project, "progress=false", "--full-table").path == "full"
    assert cli(project, "progress=false", "budget=0.3").path == "full"


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 1  # same size, different bytes
    with open(path, "r+b") as f:
        f.write(bytes(data))


def _damage(build: Path, what: str) -> None:
    cache = build / "cache"
    record = sorted((cache / "results").iterdir())[0]
    if what == "record deleted":
        record.unlink()
    elif what == "record rewritten, same size":
        _flip_last_byte(record)
    elif what == "compile entry deleted":
        shutil.rmtree(sorted((cache / "compile").iterdir())[0])
    elif what == "artifact file rewritten":
        entry = sorted((cache / "artifacts").iterdir())[0]
        _flip_last_byte(next(p for p in (entry / "files").rglob("*") if p.is_file()))
    elif what == "index damaged":
        _flip_last_byte(sorted((cache / "index").iterdir())[0])
    elif what == "manifest deleted":
        (build / "manifest.json").unlink()
    elif what == "summary deleted":
        (build / "summary.json").unlink()
    elif what == "link deleted":
        sorted((build / "artifacts").iterdir())[0].unlink()
    elif what == "doit state deleted":
        (build / ".doit.sqlite3").unlink()
    else:
        raise AssertionError(what)


@pytest.mark.parametrize(
    "what",
    [
        "record deleted",
        "record rewritten, same size",
        "compile entry deleted",
        "artifact file rewritten",
        "index damaged",
        "manifest deleted",
        "summary deleted",
        "link deleted",
        "doit state deleted",
    ],
)
def test_a_damaged_output_takes_the_full_path(project: Path, what: str) -> None:
    full, _ = noop_pair(project)
    manifest = (project / "build" / "manifest.json").read_bytes()
    _damage(project / "build", what)
    assert cli(project, "status", "progress=false").path == "full"
    repaired = cli(project, "progress=false")
    assert repaired.path == "full" and repaired.code == 0, repaired.stderr
    assert (project / "build" / "manifest.json").read_bytes() == manifest
    summary = json.loads((project / "build" / "summary.json").read_text())
    assert summary["failed"] == 0 and summary["cells"] == 2
    status = cli(project, "status", "progress=false")
    assert status.code == 0, status.stdout


def test_a_changed_input_takes_the_full_path_and_a_touched_one_does_not(project: Path) -> None:
    (project / "conf").unlink()  # this test's own conf/: its matrix is edited
    shutil.copytree(os.path.realpath(project / "rbln-build.yaml").replace("rbln-build.yaml", "conf"), project / "conf")
    time.sleep(2.2)  # a file this fresh is never stamped (RACY_NS): let the copy age
    noop_pair(project)
    matrix = project / "conf" / "matrix" / "default.yaml"
    os.utime(matrix, ns=(matrix.stat().st_atime_ns, matrix.stat().st_mtime_ns + 10**9))  # same bytes
    assert cli(project, "progress=false").path == "short"  # its content digest still matches
    matrix.write_text(MATRIX.replace("0.5]", "0.6]"))  # same size, another cell
    changed = cli(project, "progress=false")
    assert changed.path == "full" and changed.code == 0
    assert "llama3_2_1b.rebel100.b0.6" in (project / "build" / "results.txt").read_text()
    # a no-op now, but its matrix changed within the file system's clock tick of the run (here: its
    # mtime is in the future): its fingerprint cannot be trusted, so nothing is stamped
    shutil.rmtree(project / "build" / ".noop")
    future = time.time_ns() + 60 * 10**9
    os.utime(matrix, ns=(future, future))
    again = cli(project, "progress=false")
    assert again.path == "full" and "0 finalized, 2 skipped" in again.stdout
    assert not armed(project)
