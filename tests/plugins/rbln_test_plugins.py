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
FAIL_FAMILY_ENV = "RBLN_TEST_FAIL_FAMILY"
FAIL_ERROR_ENV = "RBLN_TEST_FAIL_ERROR"  # build | runtime | input


class SlowBackend(TorchExportBackend):
    """Compiles, then lingers before its entry is committed (so a test can kill it mid-compile)."""

    def compile(self, spec: Any, out_dir: Path) -> Any:
        result = super().compile(spec, out_dir)
        sleep_s = float(os.environ.get(SLEEP_ENV) or 0)
        print(f"(test backend) compile of {spec.recipe.name} sleeping {sleep_s}s before commit", file=sys.stderr, flush=True)
        time.sleep(sleep_s)
        return result


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
