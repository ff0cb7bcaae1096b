"""Plug-in backends for tests, given to a build as ``matrix.backend=rbln_test_plugins:<Class>``
(``tests/plugins`` is on the path: conftest.py for in-process tests, PYTHONPATH for subprocesses).

They are the real torch backend plus one behaviour each, steered by the test through environment
variables that only these test classes read (production code has no test hooks).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from rbln_build.backends.torch._export import TorchExportBackend
from rbln_build.errors import BuildError, InputFailure

SLEEP_ENV = "RBLN_TEST_BACKEND_SLEEP_S"
SLEEP_FAMILY_ENV = "RBLN_TEST_SLEEP_FAMILY"  # only this NPU family lingers (unset: every compile)
SLEEP_BY_ENV = "RBLN_TEST_SLEEP_BY"  # "recipe.FAMILY=seconds,..." (e.g. qwen3_8b.RBLN-CA=4): per compile
SLEEP_ONCE_ENV = "RBLN_TEST_SLEEP_ONCE_FILE"  # linger only while this file does not exist; create it first
FAIL_FAMILY_ENV = "RBLN_TEST_FAIL_FAMILY"
FAIL_ERROR_ENV = "RBLN_TEST_FAIL_ERROR"  # build | runtime | input


class SlowBackend(TorchExportBackend):
    """Compiles, then lingers before its entry is committed (so a test can kill it mid-compile)."""

    def compile(self, spec: Any, out_dir: Path) -> Any:
        result = super().compile(spec, out_dir)
        sleep_s = float(os.environ.get(SLEEP_ENV) or 0)
        family = os.environ.get(SLEEP_FAMILY_ENV)
        if family and spec.npu.family != family:
            sleep_s = 0
        by = dict(item.split("=") for item in (os.environ.get(SLEEP_BY_ENV) or "").split(",") if item)
        sleep_s = float(by.get(f"{spec.recipe.name}.{spec.npu.family}", sleep_s))
        once = os.environ.get(SLEEP_ONCE_ENV)
        if once:
            if os.path.exists(once):
                sleep_s = 0  # a retry (the first attempt was killed): commit at once
            else:
                Path(once).write_text(str(os.getpid()))
        print(
            f"(test backend) compile of {spec.recipe.name} sleeping {sleep_s}s before commit",
            file=sys.stderr,
            flush=True,
        )
        time.sleep(sleep_s)
        return result


class SlowFinalizeBackend(TorchExportBackend):
    """The first finalize of the build (whichever worker gets it: the file in RBLN_TEST_SLEEP_ONCE_FILE
    is created exclusively) writes its pid there and lingers RBLN_TEST_BACKEND_SLEEP_S seconds, so a
    test can kill the worker while it runs a batch of cells."""

    def finalize(self, spec: Any, baseline_dir: Path, num_blocks: int, out_dir: Path) -> None:
        once = os.environ.get(SLEEP_ONCE_ENV)
        if once:
            try:
                fd = os.open(once, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                pass  # another cell was first, or this is the run after the kill
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                time.sleep(float(os.environ.get(SLEEP_ENV) or 0))
        super().finalize(spec, baseline_dir, num_blocks, out_dir)


class FlakyBackend(TorchExportBackend):
    """Compiling for the NPU family named in RBLN_TEST_FAIL_FAMILY raises (after a partial write)."""

    def compile(self, spec: Any, out_dir: Path) -> Any:
        if spec.npu.family == os.environ.get(FAIL_FAMILY_ENV):
            (out_dir / "partial.bin").write_bytes(b"half")
            error = os.environ.get(FAIL_ERROR_ENV, "build")
            if error == "runtime":
                raise RuntimeError("segfault-ish")
            if error == "input":
                raise InputFailure("the compiler says this model does not fit", "insufficient_memory")
            raise BuildError("compiler crashed")
        return super().compile(spec, out_dir)


KILL_ENV = "RBLN_TEST_KILL"  # "<self|sibling>-<compile|finalize>": who is killed, and where
KILL_ONCE_ENV = "RBLN_TEST_KILL_ONCE_FILE"  # created exclusively by the one job that kills


def _first(path: str | None) -> bool:
    """Whether this job is the build's first to get here (creates ``path`` exclusively)."""
    if not path:
        return False
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


def _kill(where: str) -> None:
    """SIGKILL, as the OOM killer does: this worker ("self-...") or the pool's other workers
    ("sibling-...", busy or idle), the first time a job reaches ``where``."""
    import signal

    who, _, at = (os.environ.get(KILL_ENV) or "").partition("-")
    if at != where or not _first(os.environ.get(KILL_ONCE_ENV)):
        return
    if who == "self":
        os.kill(os.getpid(), signal.SIGKILL)
    parent = os.getppid()
    for pid in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if pid.isdigit() and int(pid) != os.getpid() and int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            if b"resource_tracker" not in cmd and b"rbln_build.cli" not in cmd:
                os.kill(int(pid), signal.SIGKILL)


class KillerBackend(TorchExportBackend):
    """The real torch backend whose first compile or first finalize (RBLN_TEST_KILL) SIGKILLs its own
    worker, after the compile's work, or the pool's other workers, then goes on (Linux /proc)."""

    def compile(self, spec: Any, out_dir: Path) -> Any:
        result = super().compile(spec, out_dir)
        _kill("compile")
        return result

    def finalize(self, spec: Any, baseline_dir: Path, num_blocks: int, out_dir: Path) -> None:
        _kill("finalize")
        super().finalize(spec, baseline_dir, num_blocks, out_dir)
