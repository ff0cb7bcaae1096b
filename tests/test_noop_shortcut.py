"""The no-op short cut (rbln_build.noop), through the real CLI on a small project of
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
# runs the real CLI, then says which path it took (the full path composes, or renders the report)
RUNNER = """
import sys
out = sys.argv[1]
sys.argv = ["rbln-build", *sys.argv[2:]]
try:
    from rbln_build.cli import main
    main()
finally:
    full = {"hydra", "rbln_build.reporting._page"} & set(sys.modules)  # composed, or rendered a page
    open(out, "w").write("full" if full else "short")
"""
TIME = re.compile(r"\(\d+\.\ds\)\. Manifest")


class Run:
    def __init__(self, proc: subprocess.CompletedProcess[str], path: str) -> None:
        self.code, self.stdout, self.stderr, self.path = proc.returncode, proc.stdout, proc.stderr, path

    def same_answer(self, other: Run) -> bool:
        strip = lambda text: TIME.sub("(T). Manifest", text)  # noqa: E731
        return (self.code, strip(self.stdout), self.stderr) == (other.code, strip(other.stdout), other.stderr)


ROOT: list[Path] = []  # the template project's root (its files aged past RACY_NS)


def cli(where: Path, *args: str, root: Path | None = None, env: dict[str, str] | None = None) -> Run:
    """``rbln-build [status|report] ARGS`` for the build dir ``where/build`` of the project ``root``
    (the template's by default), run from the template's folder (aged: the folder a run starts in is
    an input, its listing read by every import)."""
    words = [a for a in args[:1] if a in ("status", "report")]
    rest = list(args[len(words) :])
    project = [] if words == ["report"] else ["--project", str(root or ROOT[0])]
    marker = where / "path.txt"
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(marker), *words, *project, *rest, f"build_dir={where / 'build'}"],
        cwd=ROOT[0].parent,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, HF_HUB_OFFLINE="1", **(env or {})),
    )
    return Run(proc, marker.read_text())


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project built once (its build dir is copied by each test); its files older than RACY_NS."""
    from rbln_build.noop._check import RACY_NS

    base = tmp_path_factory.mktemp("noop")
    root = base / "proj"
    (root / "conf" / "matrix").mkdir(parents=True)
    (root / "rbln-build.yaml").write_text("# a project\n")
    (root / "conf" / "matrix" / "default.yaml").write_text(MATRIX)
    ROOT[:] = [root]
    built = cli(base, "progress=false")
    assert built.code == 0, built.stderr
    shutil.rmtree(base / "build" / ".noop", ignore_errors=True)
    time.sleep(RACY_NS / 1e9 + 0.2)  # inputs this fresh are never stamped (the folder too: path.txt)
    return base


@pytest.fixture
def project(template: Path, tmp_path: Path) -> Path:
    """A folder holding this test's copy of the template's build dir (``build``)."""
    shutil.copytree(template / "build", tmp_path / "build", symlinks=True)
    return tmp_path


def armed(root: Path) -> list[Path]:
    return sorted((root / "build" / ".noop").glob("*.json"))


def noop_pair(where: Path, *args: str, root: Path | None = None, env: dict[str, str] | None = None) -> tuple[Run, Run]:
    """A full no-op (it records the stamp), then the short cut."""
    full = cli(where, "progress=false", *args, root=root, env=env)
    assert full.path == "full" and armed(where), full.stderr
    short = cli(where, "progress=false", *args, root=root, env=env)
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
    elif what == "a killed run's leftover":
        (build / ".tmp-summary.json-99999").write_text("{")
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
        "a killed run's leftover",
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
    assert not list((project / "build").glob(".tmp-*"))  # the full path cleaned what a killed run left


def test_a_changed_input_takes_the_full_path_and_a_touched_one_does_not(project: Path) -> None:
    own = project / "own"  # this test's own project: its matrix is edited
    shutil.copytree(ROOT[0], own)
    time.sleep(2.2)  # a file this fresh is never stamped (RACY_NS): let the copy age
    full = cli(project, "progress=false", root=own)
    assert full.path == "full" and armed(project), full.stderr
    assert cli(project, "progress=false", root=own).path == "short"
    matrix = own / "conf" / "matrix" / "default.yaml"
    os.utime(matrix, ns=(matrix.stat().st_atime_ns, matrix.stat().st_mtime_ns + 10**9))  # same bytes
    assert cli(project, "progress=false", root=own).path == "short"  # its content digest still matches
    matrix.write_text(MATRIX.replace("0.5]", "0.6]"))  # same size, another cell
    changed = cli(project, "progress=false", root=own)
    assert changed.path == "full" and changed.code == 0
    assert "llama3_2_1b.rebel100.b0.6" in (project / "build" / "results.txt").read_text()
    # a no-op now, but its matrix changed within the file system's clock tick of the run (here: its
    # mtime is in the future): its fingerprint cannot be trusted, so nothing is stamped
    shutil.rmtree(project / "build" / ".noop")
    future = time.time_ns() + 60 * 10**9
    os.utime(matrix, ns=(future, future))
    again = cli(project, "progress=false", root=own)
    assert again.path == "full" and "0 finalized, 2 skipped" in again.stdout
    assert not armed(project)


def test_a_recipe_folder_made_in_the_project_takes_the_full_path(project: Path) -> None:
    from rbln_build.memory._shipped import shipped_dir

    own = project / "own"  # a project without recipes/: a recipe of its own would shadow the shipped one
    shutil.copytree(ROOT[0], own)
    time.sleep(2.2)  # let the copy age (RACY_NS)
    noop_pair(project, root=own)
    shutil.copytree(shipped_dir("recipes") / "llama3_2_1b", own / "recipes" / "llama3_2_1b")
    with open(own / "recipes" / "llama3_2_1b" / "recipe.yaml", "a") as f:
        f.write("# the project's own copy\n")  # other recipe bytes: another compile key
    changed = cli(project, "progress=false", root=own)
    assert changed.path == "full" and changed.code == 0, changed.stderr
    assert json.loads((project / "build" / "summary.json").read_text())["compiled"] == 1


def test_report_answers_from_its_stamp_until_something_it_read_or_wrote_changes(project: Path) -> None:
    pytest.importorskip("matplotlib")
    page = project / "build" / "report" / "index.html"
    drawn = cli(project, "report")
    assert drawn.code == 0 and drawn.path == "full", drawn.stderr
    time.sleep(2.2)  # the figures it drew are read by the next report: too fresh to stamp (RACY_NS)
    full = cli(project, "report")
    assert full.path == "full"
    html = page.read_bytes()
    before = page.stat()
    short = cli(project, "report")
    assert short.path == "short" and short.same_answer(full)
    assert page.stat() == before  # nothing written: the page is what the report would write
    figure = sorted((project / "build" / "report" / ".figures").glob("*.png"))[0]
    figure.unlink()
    again = cli(project, "report")
    assert again.path == "full" and page.read_bytes() == html and figure.is_file()
    # a build that changes the build dir (here: its cache, a record removed and redone)
    sorted((project / "build" / "cache" / "results").iterdir())[0].unlink()
    assert cli(project, "progress=false").code == 0
    assert cli(project, "report").path == "full" and page.read_bytes() == html


def test_a_stamp_folder_linked_out_of_the_build_dir_is_never_used(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / "build" / ".noop").symlink_to(outside)
    first = cli(project, "progress=false")
    second = cli(project, "progress=false")
    assert first.code == second.code == 0 and (first.path, second.path) == ("full", "full")
    assert list(outside.iterdir()) == []  # nothing written through the link


def test_a_package_appearing_in_a_pythonpath_folder_under_tmpdir_takes_the_full_path(project: Path) -> None:
    """The miss of issue 36: a PYTHONPATH folder that did not exist when the stamp was written, under
    the system temp dir, then holding a package (a newer transformers, say). Nothing proves the run
    unchanged, so it is not short-cut: no exemption by location."""
    tmpdir = project / "tmp"
    tmpdir.mkdir()
    time.sleep(2.2)  # a folder this fresh is never stamped (RACY_NS): let it age
    later = tmpdir / "site"  # not there yet
    env = {"TMPDIR": str(tmpdir), "PYTHONPATH": os.pathsep.join([str(later), os.environ.get("PYTHONPATH", "")])}
    noop_pair(project, env=env)
    (later / "transformers").mkdir(parents=True)
    (later / "transformers" / "__init__.py").write_text("__version__ = '99.0.0'\n")
    after = cli(project, "progress=false", env=env)
    assert after.path == "full" and after.code == 0, after.stderr


def test_a_count_line_of_the_recorded_run_is_not_replayed(tmp_path: Path) -> None:
    """A no-op whose full path printed the plain display's count line (a warning was shown, or it ran
    past ``every_s`` on a busy machine) must not replay that line: its elapsed time was the recorded
    run's, not the short cut's (issue 36)."""
    from rbln_build.noop._check import TOOK
    from rbln_build.noop._record import Recording

    recording = Recording("key", tmp_path, [False], "stamp")
    try:
        print("warning: something to say")
        print("[progress 100%] compiles 4/4 | cells 8/8 | 17s elapsed", file=sys.stderr)
        print("8 cells: 0 compiled, 8 skipped (12.3s). Manifest: build/manifest.json")
    finally:
        recording.close()
    chunks = recording._chunks(counts=True)
    assert chunks is not None
    text = "".join(t for _, t in chunks)
    assert "[progress" not in text and "17s elapsed" not in text
    assert text == f"warning: something to say\n8 cells: 0 compiled, 8 skipped {TOOK} Manifest: build/manifest.json\n"
