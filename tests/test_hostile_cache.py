"""The build directory's cache is not trusted (docs/security.md): a file in it that is a FIFO, a link
to ``/dev/zero`` or a document nested without end is a damaged entry, record or index: a miss (with
a warning naming it when the build would use it), never a hang, an unbounded read or a traceback.

Before (issue 20's audit, session 4): a result record that was a FIFO hung ``status``, ``gc`` and the
build; one linked to ``/dev/zero`` was a MemoryError (exit 3) in ``status`` and the build; an
artifact's ``entry.json`` that was a FIFO hung ``status``; an entry's file linked to ``/dev/zero``
was read without end by a full verification. Each case runs the real CLI in a child with a deadline
and a capped address space, so a regression fails here instead of hanging or exhausting the host.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SMALL = ["matrix=plans", "model=qwen3_8b", "device=rebel100", "progress=false"]  # one compile, two cells


def rbln(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

    return subprocess.run(
        [sys.executable, "-m", "rbln_build.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, **env),
        preexec_fn=cap,
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {"HF_HUB_OFFLINE": "1", "RBLN_BUILD_CACHE": str(tmp_path_factory.mktemp("inventory"))}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Path:
    work = tmp_path_factory.mktemp("clean")
    proc = rbln([*SMALL, f"build_dir={work / 'build'}"], work, env)
    assert proc.returncode == 0, proc.stderr
    return work / "build"


def _first(folder: Path) -> Path:
    return sorted(folder.iterdir())[0]


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.unlink()
    os.symlink("/dev/zero", path)


def _deep(path: Path) -> None:
    path.write_text("[" * 100_000 + "]" * 100_000)


PLANTS: dict[str, Callable[[Path], None]] = {
    "record-fifo": lambda b: _fifo(_first(b / "cache" / "results")),
    "record-dev-zero": lambda b: _dev_zero(_first(b / "cache" / "results")),
    "record-deep": lambda b: _deep(_first(b / "cache" / "results")),
    "entry-json-fifo": lambda b: _fifo(_first(b / "cache" / "artifacts") / "entry.json"),
    "entry-json-dev-zero": lambda b: _dev_zero(_first(b / "cache" / "compile") / "entry.json"),
    "entry-file-dev-zero": lambda b: _dev_zero(_first(_first(b / "cache" / "artifacts") / "files")),
    "index-fifo": lambda b: _fifo(_first(b / "cache" / "index")),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_hostile_file_in_the_cache_is_a_miss_never_a_hang(
    clean: Path, env: dict[str, str], tmp_path: Path, plant: str
) -> None:
    build = tmp_path / "build"
    shutil.copytree(clean, build, symlinks=True)
    PLANTS[plant](build)
    args = [*SMALL, f"build_dir={build}"]
    status = rbln(["status", *args], tmp_path, env)  # read-only: up to date, or what it would redo
    assert status.returncode in (0, 1) and "Traceback" not in status.stderr, status.stderr
    gc = rbln(["gc", "--dry-run", *args], tmp_path, env)
    assert gc.returncode == 0 and "Traceback" not in gc.stderr, gc.stderr
    again = rbln(args, tmp_path, env)  # the build repairs what it needs and publishes the same cells
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert (build / "manifest.json").read_bytes() == (clean / "manifest.json").read_bytes()
    after = rbln(["status", *args], tmp_path, env)
    assert after.returncode == 0, after.stdout + after.stderr
