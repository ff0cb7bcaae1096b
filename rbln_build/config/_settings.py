"""The frozen settings a composed config becomes (what code sees; nothing downstream of
``_config`` touches OmegaConf)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..quantization import Quantization
from ._scale import Scale

__all__ = ["Device", "Model", "ExpectedFailure", "SubMatrix", "Matrix", "BuildSettings"]


# ---------------------------------------------------------------- plain objects (what code sees)


@dataclass(frozen=True)
class Device:
    name: str
    npu: str
    num_devices: int


@dataclass(frozen=True)
class Model:
    name: str
    recipe: str
    options: tuple[tuple[str, Any], ...] = ()  # build options set by the model config, sorted

    def option(self, key: str) -> Any:
        return dict(self.options).get(key)


@dataclass(frozen=True)
class ExpectedFailure:
    cell: str
    kind: str
    message: str | None = None

    def matches(self, kind: str | None, message: str | None) -> bool:
        return kind == self.kind and (self.message is None or message == self.message)


@dataclass(frozen=True)
class SubMatrix:
    """One cross product, fully resolved (inherited and narrowed): an ``include`` entry."""

    where: str  # "matrix.include[0]": where it was configured, for messages
    models: tuple[Model, ...]  # may be empty: narrowed away
    devices: tuple[Device, ...]
    budgets: tuple[Any, ...]
    batch_sizes: tuple[int, ...] | None
    max_seq_lens: tuple[int, ...] | None
    kvcache_num_blocks: tuple[int, ...]
    attn_impl: str | None
    kvcache_partition_len: int | None
    quantizations: tuple[Quantization, ...] | None = None  # matrix.quantizations; None: each recipe's own


@dataclass(frozen=True)
class Matrix:
    models: tuple[Model, ...]
    devices: tuple[Device, ...]
    budgets: tuple[Any, ...]
    batch_sizes: tuple[int, ...] | None
    max_seq_lens: tuple[int, ...] | None
    kvcache_num_blocks: tuple[int, ...]
    attn_impl: str | None
    kvcache_partition_len: int | None
    backend: str
    expect_failure: tuple[ExpectedFailure, ...]
    include: tuple[SubMatrix, ...] = ()
    narrowed: bool = False  # model=, device=, budget= or a matrix.<key>= override changed it: expect_failure unchecked
    quantizations: tuple[Quantization, ...] | None = None
    max_perplexity_increase: float | None = None  # the quality gate of quantized cells
    min_greedy_agreement: float | None = None

    def parts(self) -> tuple[SubMatrix, ...]:
        """The main product, then each include entry, in expansion order."""
        main = SubMatrix(
            where="matrix",
            models=self.models,
            devices=self.devices,
            budgets=self.budgets,
            batch_sizes=self.batch_sizes,
            max_seq_lens=self.max_seq_lens,
            kvcache_num_blocks=self.kvcache_num_blocks,
            attn_impl=self.attn_impl,
            kvcache_partition_len=self.kvcache_partition_len,
            quantizations=self.quantizations,
        )
        return (main, *self.include)


@dataclass(frozen=True)
class BuildSettings:
    matrix: Matrix
    build_dir: Path
    recipes_dir: Path
    progress: bool
    deployment: Any = None  # a _deployment.Deployment: build its planned cells instead of the matrix
    recipe_dirs: tuple[Path, ...] = ()  # searched in order (a project's recipes/, then the shipped); () = recipes_dir
    scale: Scale = Scale()  # jobs, executor, remote cache (rbln_build.config._scale)
    # The matrix as declared, when model=/device=/budget= narrowed ``matrix`` or a deployment replaced
    # it (else None): a narrowed
    # run keeps the manifest entries of the declared matrix's other cells (_cells.declared_cells).
    declared: Matrix | None = None
