"""The build directory's cache is not trusted (docs/security.md): a file in it that is a FIFO, a link
to ``/dev/zero`` or a document nested without end is a damaged entry, record or index: a miss (with
a warning naming it when the build would use it), never a hang, an unbounded read or a traceback.

Before (issue 20's audit, session 4): a result record that was a FIFO hung ``status``, ``gc`` and the
build; one linked to ``/dev/zero`` was a MemoryError (exit 3) in ``status`` and the build; an
artifact's ``entry.json`` that was a FIFO hung ``status``; an entry's file linked to ``/dev/zero``
was read without end by a full verification. The build directory's own files the build reads (the
no-op stamps, the progress history, the manifest when links roll forward) and the inventory cache
were read the same way. Each case runs the real CLI in a child with a deadline
and a capped address space, so a regression fails here instead of hanging or exhausting the host.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
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
    for _ in range(2):  # the second run is a no-op: it leaves the short cut's stamps
        proc = rbln([*SMALL, f"build_dir={work / 'build'}"], work, env)
        assert proc.returncode == 0, proc.stderr
    assert list((work / "build" / ".noop").glob("*.json")) and list((work / "build" / ".noop").glob("*.ids"))
    return work / "build"


def _first(folder: Path) -> Path:
    return sorted(folder.iterdir())[0]


def _some(paths: Iterable[Path]) -> list[Path]:
    found = sorted(paths)
    assert found, "nothing to plant in"
    return found


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
    # the build directory's own files, which the build reads (a user or a script may have put anything there)
    "noop-stamp-fifo": lambda b: [_fifo(p) for p in _some((b / ".noop").glob("*.json"))],
    "noop-ids-dev-zero": lambda b: [_dev_zero(p) for p in _some((b / ".noop").glob("*.ids"))],
    "progress-history-fifo": lambda b: _fifo(b / "progress-history.json"),
    "manifest-fifo-mid-publish": lambda b: (_fifo(b / "manifest.json"), (b / ".publishing").write_bytes(b"")),
    # the memory model's inventory cache (RBLN_BUILD_CACHE)
    "inventory-fifo": lambda b: (
        _fifo(_first(b.parent / "inventory" / "inventory")),
        shutil.rmtree(b / "cache" / "compile"),  # so that the build needs the inventory again
    ),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_hostile_file_in_the_cache_is_a_miss_never_a_hang(
    clean: Path, env: dict[str, str], tmp_path: Path, plant: str
) -> None:
    build = tmp_path / "build"
    shutil.copytree(clean, build, symlinks=True)
    shutil.copytree(env["RBLN_BUILD_CACHE"], tmp_path / "inventory")  # a copy of its own to plant in
    env = dict(env, RBLN_BUILD_CACHE=str(tmp_path / "inventory"))
    args = [*SMALL, f"build_dir={build}"]
    if plant.startswith("noop"):  # the short cut's stamps name the build dir: a no-op run here writes them
        shutil.rmtree(build / ".noop")
        time.sleep(2.5)  # inputs changed (copied) within 2 s of a run are not stamped (noop._check.RACY_NS)
        assert rbln(args, tmp_path, env).returncode == 0
    PLANTS[plant](build)
    status = rbln(["status", *args], tmp_path, env)  # read-only: up to date, what it would redo, or
    assert status.returncode in (0, 1, 2) and "Traceback" not in status.stderr, status.stderr
    gc = rbln(["gc", "--dry-run", *args], tmp_path, env)
    assert gc.returncode in (0, 2) and "Traceback" not in gc.stderr, gc.stderr
    for proc in (status, gc):
        if proc.returncode == 2:  # the manifest they read is not a file: one line naming it
            [line] = proc.stderr.strip().splitlines()
            assert plant.startswith("manifest") and "manifest.json" in line and "not a regular file" in line, line
    again = rbln(args, tmp_path, env)  # the build repairs what it needs and publishes the same cells
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert (build / "manifest.json").read_bytes() == (clean / "manifest.json").read_bytes()
    after = rbln(["status", *args], tmp_path, env)
    assert after.returncode == 0, after.stdout + after.stderr
