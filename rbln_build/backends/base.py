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
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..attention import AttentionConfig
from ..errors import ConfigError
from ..npu import NpuTarget
from ..recipes import Recipe
from ..report import AllocationReport

__all__ = ["CompileSpec", "CompileResult", "Backend", "get_backend", "BACKENDS"]

# name -> "module:Class"; modules are imported lazily.
BACKENDS = {
    "torch": "rbln_build.backends.torch_export:TorchExportBackend",
    "rbln": "rbln_build.backends.rbln:RblnBackend",
}


@dataclass(frozen=True)
class CompileSpec:
    """Everything that changes what a backend compiles. Budget and block count are not here."""

    recipe: Recipe
    npu: NpuTarget
    num_devices: int
    attention: AttentionConfig

    def key_fields(self) -> dict[str, Any]:
        """Canonical, path-free inputs for the compile key (the backend adds its toolchain)."""
        return {
            "recipe": self.recipe.name,
            "recipe_hash": self.recipe.content_hash,
            "npu_family": self.npu.family,
            "num_devices": self.num_devices,
            "attention": self.attention.to_json(),
        }


@dataclass(frozen=True)
class CompileResult:
    report: AllocationReport
    produced: str  # "program": a runnable compiled artifact; "plan": a resolved plan, no program


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

        Must write ``rbln_config.json`` (optimum-rbln key names, the resolved count, and ``npu``).
        """


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise ConfigError(
            f"backend: unknown compile backend {name!r}; choose one of {', '.join(sorted(BACKENDS))}."
        )
    module_name, cls_name = BACKENDS[name].split(":")
    module = importlib.import_module(module_name)
    backend: Backend = getattr(module, cls_name)()
    return backend
