"""Compile each tiny recipe with the torch backend once per test process (exports are slow-ish).

Shared by test_backend_torch.py and test_runtime.py through a process-level cache rather than a
session fixture in conftest.py, so those modules stay self-contained.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rbln_build.backends import CompileResult, CompileSpec, get_backend
from rbln_build.estimator._npu import resolve_npu
from rbln_build.memory._recipes import Recipe, load_recipe

_ROOT = Path(tempfile.mkdtemp(prefix="rbln-build-tests-"))
atexit.register(shutil.rmtree, _ROOT, True)


def spec_for(recipe: Recipe, npu: str = "atom_max", num_devices: int = 1) -> CompileSpec:
    return CompileSpec.for_recipe(recipe, resolve_npu(npu), num_devices)


@dataclass(frozen=True)
class Compiled:
    spec: CompileSpec
    baseline: Path
    result: CompileResult
    exports: int  # exports the compile ran (measured with paged.export_count)


@functools.cache
def compiled(name: str) -> Compiled:
    from rbln_build.backends.torch import _paged as paged

    spec = spec_for(load_recipe(name))
    baseline = _ROOT / name / "baseline"
    baseline.mkdir(parents=True)
    before = paged.export_count()
    result = get_backend("torch").compile(spec, baseline)
    return Compiled(spec, baseline, result, paged.export_count() - before)


def finalized(name: str, num_blocks: int) -> Path:
    """The cell artifact of ``name`` at ``num_blocks`` (finalized once per process)."""
    return _finalized(name, num_blocks)


@functools.cache
def _finalized(name: str, num_blocks: int) -> Path:
    c = compiled(name)
    out = _ROOT / name / f"cell-{num_blocks}"
    out.mkdir()
    get_backend("torch").finalize(c.spec, c.baseline, num_blocks, out)
    return out


def own_copy(name: str, num_blocks: int, dst: Path) -> Path:
    """A copy of ``finalized(name, num_blocks)`` at ``dst`` whose program.pt2 is a file of its own (not
    a hard link into the shared cell), for a test that damages it."""
    shutil.copytree(finalized(name, num_blocks), dst)
    (dst / "program.pt2").unlink()
    shutil.copyfile(finalized(name, num_blocks) / "program.pt2", dst / "program.pt2")
    return dst


def run_here(capsys: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m rbln_build.run ARGS`` in this process (no second torch import): exit status, stdout,
    stderr, through pytest's ``capsys``."""
    from rbln_build.run import main

    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out.out, out.err)
