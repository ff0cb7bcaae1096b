"""The command line as one tool: every command has its --help, the top-level --help lists them all,
--version names rbln-build and its toolchain, an unknown command is named with the closest ones, and
a closed pipe ends quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rbln_build.commands._main import COMMANDS

pytestmark = pytest.mark.integration


def rbln(args: list[str], cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbln_build.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        **kw,  # type: ignore[arg-type]
    )


def test_top_level_help_lists_every_command(tmp_path: Path) -> None:
    proc = rbln(["--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    for name in COMMANDS:
        assert f"\n  {name} " in proc.stdout, name
    assert "Config groups" in proc.stdout and "atom_max_x4" in proc.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_has_its_own_help(name: str, tmp_path: Path) -> None:
    proc = rbln([name, "--help"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "usage" in proc.stdout.lower() or "Build:" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert list(tmp_path.iterdir()) == []  # a help writes nothing


def test_version_names_rbln_build_and_its_toolchain(tmp_path: Path) -> None:
    from rbln_build import __version__

    proc = rbln(["--version"], tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.startswith(f"rbln-build {__version__} (") and "torch" in proc.stdout
    assert "Hydra" not in proc.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["stauts"], "unknown command 'stauts' (did you mean status?)"),
        (["relase"], "unknown command 'relase'"),
        (["--json", "status"], "put the command first"),
    ],
)
def test_unknown_or_misplaced_commands_are_named(args: list[str], expected: str, tmp_path: Path) -> None:
    proc = rbln(args, tmp_path)
    assert proc.returncode == 2
    assert expected in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "EQUAL" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_project_flag_before_the_command(tmp_path: Path) -> None:
    assert rbln(["init", "proj"], tmp_path).returncode == 0
    proc = rbln(["--project", str(tmp_path / "proj"), "status", "--json"], tmp_path)
    assert proc.returncode == 1, proc.stderr  # nothing built yet: a build would do everything
    assert '"up_to_date": false' in proc.stdout


def test_help_inside_a_project_lists_its_groups_and_the_shipped_ones(tmp_path: Path) -> None:
    assert rbln(["init", "proj"], tmp_path).returncode == 0
    proc = rbln(["--help"], tmp_path / "proj")
    assert proc.returncode == 0, proc.stderr
    assert "powered by Hydra" not in proc.stdout
    matrix_line = next(line for line in proc.stdout.splitlines() if line.strip().startswith("matrix "))
    assert "main (project)" in matrix_line and "plans" in matrix_line  # the project's and the shipped
    assert "\n  status " in proc.stdout  # the commands, as outside a project


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """``rbln-build status --json | head -1``: no BrokenPipe traceback, exit 0."""
    proc = subprocess.run(
        f"{sys.executable} -m rbln_build.cli status --json matrix=plans build_dir={tmp_path}/b | head -1",
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        executable="/bin/bash",
    )
    assert proc.stdout.strip() == "{"
    assert "Traceback" not in proc.stderr and "Broken" not in proc.stderr, proc.stderr
    piped = subprocess.run(
        f"set -o pipefail; {sys.executable} -m rbln_build.cli diff {tmp_path}/nope.json {tmp_path}/nope.json | head -1",
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        executable="/bin/bash",
    )
    assert "Traceback" not in piped.stderr


ENTRY = """
import atexit, sys, threading, time
from pathlib import Path
import rbln_build.commands._main as m
out = Path(sys.argv[1])
class Freed:
    def __del__(self):  # run by the interpreter's teardown, which entry() skips when it can
        out.with_suffix(".freed").write_text("freed")
m.kept = Freed()
def main():
    atexit.register(lambda: out.with_suffix(".atexit").write_text("ran"))
    if sys.argv[2] == "thread":  # a thread still running: the usual exit, which waits for it
        threading.Thread(target=lambda: (time.sleep(0.5), out.with_suffix(".thread").write_text("done"))).start()
    print("printed, not flushed", end="")
    sys.exit(int(sys.argv[3]))
m.main = main
m.entry()
"""


@pytest.mark.parametrize("how", ["alone", "thread"])
def test_the_entry_point_keeps_the_exit_status_hooks_output_and_waits_for_threads(tmp_path: Path, how: str) -> None:
    # entry() leaves without the interpreter's teardown: the status, atexit hooks and buffered output
    # must still be what a normal exit gives, and a thread still running is waited for.
    for status in (0, 1, 3):
        proc = subprocess.run(
            [sys.executable, "-c", ENTRY, str(tmp_path / "o"), how, str(status)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == status and proc.stdout == "printed, not flushed", proc.stderr
        assert (tmp_path / "o.atexit").read_text() == "ran"
        assert (tmp_path / "o.thread").exists() == (how == "thread")
        assert (tmp_path / "o.freed").exists() == (how == "thread")  # the teardown: skipped when alone
        for name in ("o.atexit", "o.thread", "o.freed"):
            (tmp_path / name).unlink(missing_ok=True)


def _help_examples() -> list[str]:
    from rbln_build.commands._help import OVERRIDES as HELP

    block = HELP.split("Examples:\n", 1)[1].split("\n\n", 1)[0]
    return [
        line.strip() for line in block.splitlines() if line.strip().startswith("rbln-build") and "--cfg" not in line
    ]


@pytest.mark.slow  # real builds of each example (10-50 s each)
@pytest.mark.parametrize("example", _help_examples())
def test_every_example_of_the_help_builds_cleanly(example: str, tmp_path: Path) -> None:
    """A new user's first commands (issue 36): the examples in ``rbln-build --help`` exit 0."""
    import shlex

    args = shlex.split(example)[1:]
    proc = subprocess.run(
        [sys.executable, "-m", "rbln_build.cli", *args, "progress=false"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"{example}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def test_the_version_agrees_everywhere_and_names_the_checkouts_commit(tmp_path: Path) -> None:
    """pyproject.toml, rbln_build.__version__ and CHANGELOG.md's newest released heading say one
    version; run from this git checkout, --version names its commit (``+modified`` when it differs)."""
    import re
    import subprocess
    import tomllib

    from rbln_build import __version__

    root = Path(__file__).resolve().parent.parent
    assert tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"] == __version__
    released = re.findall(r"^## \[(\d[^\]]*)\]", (root / "CHANGELOG.md").read_text(), flags=re.M)
    assert released and released[0] == __version__, released
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not run from a git checkout")
    proc = rbln(["--version"], tmp_path)
    assert re.match(
        rf"rbln-build {re.escape(__version__)} \(commit {head.stdout.strip()}(\+modified)?; torch ", proc.stdout
    )
