"""The backend interface: compile once per compile key, finalize once per cell.

    compile(spec, out_dir)                    -> CompileResult (baseline artifact + AllocationReport)
    finalize(spec, baseline_dir, n, out_dir)  -> None (the cell artifact, KV pool resized to n blocks)

The caller owns atomicity: ``out_dir`` is a fresh empty temporary directory that the caller
renames into place only after the call returns. A backend writes only inside ``out_dir``.
The estimator never knows which backend produced a report.

``toolchain()`` names the versions that change what the backend produces; it goes into the
compile key and must be cheap (importlib.metadata, never ``import torch``).
"""

from __future__ import annotations

import abc
import functools
import importlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..estimator import AllocationReport
from ..memory import CompileSpec
from ._record import record_for, write_json, write_record

__all__ = [
    "CompileSpec",
    "CompileResult",
    "Backend",
    "get_backend",
    "backend_path",
    "BACKENDS",
    "write_json",
    "compile_plan",
    "finalize_plan",
]

# name -> "module:Class"; modules are imported lazily.
BACKENDS = {
    "torch": "rbln_build.backends.torch._export:TorchExportBackend",
    "rbln": "rbln_build.backends._rbln:RblnBackend",
}


@dataclass(frozen=True)
class CompileResult:
    report: AllocationReport
    produced: str  # "program": a CPU program (torch); "rbln": compiled NPU models; "plan": no program


class Backend(abc.ABC):
    name: str = ""

    @abc.abstractmethod
    def toolchain(self) -> dict[str, str]:
        """Versions that change the output, e.g. {"torch": "2.13.0", "transformers": "5.15.1"}."""

    @abc.abstractmethod
    def compile(self, spec: CompileSpec, out_dir: Path) -> CompileResult:
        """Build the baseline for ``spec`` into ``out_dir``; return its AllocationReport."""

    @abc.abstractmethod
    def finalize(self, spec: CompileSpec, baseline_dir: Path, num_blocks: int, out_dir: Path) -> None:
        """Write the cell artifact with a KV pool of exactly ``num_blocks`` blocks into ``out_dir``.

        Must write ``rbln-build.json`` (``_record.record_for``: optimum-rbln key names, the resolved
        count, the target NPU, what the artifact is and the sha256 of its programs). Only a cell that
        optimum-rbln can load holds an ``rbln_config.json``, exactly as optimum-rbln writes it.
        A count the inputs cannot give raises ``InputFailure`` (stored, not retried).
        """


def compile_plan(spec: CompileSpec, out_dir: Path, **baseline: Any) -> CompileResult:
    """The baseline of a recipe without weights: the memory model's report, no program (never faked).

    Writes ``config.json``, ``report.json`` and ``baseline.json`` (``produced: plan`` + ``baseline``).
    """
    from .. import memory  # lazily: the memory model pulls in the inventory machinery
    from ..memory import copy_companions

    report = memory.build_report(spec)
    write_json(out_dir / "config.json", spec.recipe.hf_config)
    copy_companions(spec.recipe, out_dir)  # a recipe's own tokenizer: serve-command hands it to vllm
    write_json(out_dir / "report.json", report.to_json())
    write_json(out_dir / "baseline.json", {**baseline, "produced": "plan"})
    return CompileResult(report, "plan")


def finalize_plan(spec: CompileSpec, baseline_dir: Path, num_blocks: int, out_dir: Path) -> None:
    """The cell of a plan: ``rbln-build.json`` with ``"artifact": "plan"`` and the HF config, no program
    (and no ``rbln_config.json``, so no loader takes it for a compiled model), with the recipe's
    tokenizer and generation config when it has them."""
    from ..memory import copy_from

    shutil.copyfile(baseline_dir / "config.json", out_dir / "config.json")
    copy_from(baseline_dir, out_dir, spec.recipe.license_file)
    write_record(out_dir, record_for(spec, num_blocks, "plan", programs={}, directory=out_dir))


_IMPORT_PATH = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*")


def backend_path(name: str) -> str:
    """The ``module:Class`` of a backend given by short name (``torch``, ``rbln``) or import path.
    Raises ConfigError naming ``matrix.backend`` for anything else."""
    if name in BACKENDS:
        return BACKENDS[name]
    if isinstance(name, str) and _IMPORT_PATH.fullmatch(name):
        return name
    raise ConfigError(
        f"matrix.backend: unknown compile backend {name!r}; choose one of {', '.join(sorted(BACKENDS))}, "
        "or give a plug-in as an import path 'package.module:BackendClass'."
    )


@functools.cache
def get_backend(name: str) -> Backend:
    """The backend instance for a short name or a ``module:Class`` import path (one per process)."""
    path = backend_path(name)
    module_name, cls_name = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"matrix.backend: cannot import {module_name!r} for backend {name!r}: {exc}.") from None
    cls = getattr(module, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise ConfigError(
            f"matrix.backend: {path!r} is not a subclass of rbln_build.backends.Backend; "
            "a plug-in backend implements toolchain(), compile() and finalize()."
        )
    return cls()
