"""The typed schemas of the Hydra config groups (what YAML may say), registered in Hydra's
ConfigStore. OmegaConf checks a composed config against them, so a misspelt key or a wrong type
fails at composition with the key's path. ``_config`` converts the result to frozen settings.
OmegaConf reads ``typing.Optional``/``List`` annotations, not PEP 604/585 ones (hence ruff's
per-file ignore).
"""

from __future__ import annotations

import enum
import re
import sys
from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..errors import ConfigError
from ._scale import CacheConf, ExecutorConf

__all__ = [
    "schema_field_names",
    "AttnImpl",
    "DeviceConf",
    "ModelConf",
    "ExpectedFailureConf",
    "MatrixIncludeConf",
    "MatrixConf",
    "BuildConf",
    "register_build_schema",
]


class AttnImpl(enum.Enum):
    eager = "eager"
    flash_attn = "flash_attn"


# ---------------------------------------------------------------- schemas (what YAML may say)


@dataclass
class DeviceConf:
    """conf/device/<name>.yaml: one device target."""

    npu: str = MISSING  # an NPU name (RBLN-CA25, RBLN-CR03) or alias
    num_devices: int = 1  # tensor parallel; the budget applies to each device


@dataclass
class ModelConf:
    """conf/model/<name>.yaml: a recipe, and build options that override the recipe's defaults."""

    recipe: str = MISSING  # folder name under recipes_dir
    batch_size: Optional[int] = None
    max_seq_len: Optional[int] = None  # tokens
    attn_impl: Optional[AttnImpl] = None
    kvcache_partition_len: Optional[int] = None  # tokens
    kvcache_block_size: Optional[int] = None  # tokens
    prefill_chunk_size: Optional[int] = None  # tokens


@dataclass
class ExpectedFailureConf:
    """A cell that is declared not to build. It is reported, but does not fail the run when the
    build fails with exactly this ``kind`` (and ``message``, if given). A cell that then builds is
    an unexpected success and fails the run, so the declaration cannot go stale silently."""

    cell: str = MISSING
    kind: str = MISSING  # EstimateError.kind, e.g. insufficient_memory
    message: Optional[str] = None  # the exact error message, when it should be pinned


@dataclass
class MatrixIncludeConf:
    """One entry of ``matrix.include``: a sub-matrix with the main matrix's axes, expanded the same
    way and appended after the main product. A key the entry omits takes the main matrix's value
    (as configured, before any narrowing); an explicit null means what it means in the main matrix
    (batch_sizes, max_seq_lens, attn_impl, kvcache_partition_len: each model's default)."""

    models: List[str] = MISSING
    devices: List[str] = MISSING
    budgets: List[Any] = MISSING
    batch_sizes: Optional[List[int]] = MISSING
    max_seq_lens: Optional[List[int]] = MISSING
    kvcache_num_blocks: List[int] = MISSING
    attn_impl: Optional[AttnImpl] = MISSING
    kvcache_partition_len: Optional[int] = MISSING
    quantizations: Optional[List[str]] = MISSING


@dataclass
class MatrixConf:
    """The matrix: the product models x devices x batch_sizes x max_seq_lens x quantizations x
    kvcache_num_blocks x budgets, in that order (budgets vary fastest), then the cells of each ``include`` entry."""

    models: List[str] = MISSING  # conf/model/<name>.yaml
    devices: List[str] = MISSING  # conf/device/<name>.yaml
    budgets: List[Any] = field(default_factory=lambda: [None])  # memory_budget values, as typed
    batch_sizes: Optional[List[int]] = None  # null: each model's default
    max_seq_lens: Optional[List[int]] = None  # null: each model's default
    kvcache_num_blocks: List[int] = field(default_factory=lambda: [0])  # 0 = resolve from the budget
    attn_impl: Optional[AttnImpl] = None  # null: each model's default
    kvcache_partition_len: Optional[int] = None  # null: each model's default
    # Quantized variants (quantization._formats): none, w8, w4, wfp8, w8a8, ...; null: each recipe's own
    quantizations: Optional[List[str]] = None
    # A quantized cell whose perplexity exceeds its float weights' by more than this fraction
    # (0.05: 5%) fails with its figures (kind quality_gate); null: no gate
    max_perplexity_increase: Optional[float] = None
    min_greedy_agreement: Optional[float] = None  # likewise, the share of greedy tokens equal to the float ones'
    backend: str = "torch"  # a registered name (torch, rbln) or a plug-in 'package.module:Class'
    expect_failure: List[ExpectedFailureConf] = field(default_factory=list)  # applies to every cell
    # Sub-matrices appended after the main product, in order. Each entry is checked against
    # MatrixIncludeConf by settings_from_config rather than by Hydra, so that an error names the
    # entry's index (matrix.include[0].budgts); OmegaConf reports only "budgts" inside a list.
    include: List[Any] = field(default_factory=list)


@dataclass
class BuildConf:
    """conf/config.yaml: the root."""

    matrix: MatrixConf = MISSING
    model: Optional[ModelConf] = None  # set by `model=<name>`: narrows the model axis
    device: Optional[DeviceConf] = None  # set by `device=<name>`: narrows the device axis
    budget: Any = MISSING  # set by `budget=<value>`: narrows the budget axis (a value or a list)
    deployment: Any = None  # set by `deployment=<name>`: conf/deployment/, schema _deployment.DeploymentConf
    build_dir: str = "build"  # relative to the current directory
    recipes_dir: Optional[str] = None  # null: the repository's recipes/
    progress: bool = True  # a live status line on a terminal (false: plain lines, as in CI)
    jobs: Optional[int] = None  # worker processes for compiles (null: the cores); see _scale
    executor: ExecutorConf = field(default_factory=ExecutorConf)  # conf/executor/: local or ray
    cache: CacheConf = field(default_factory=CacheConf)  # cache.remote: a shared second level
    shard: Optional[str] = (
        None  # "I/N": build 1/N of the compile keys into cache.remote; "merge/N": merge them (_shard)
    )


_registered = False


def register_build_schema() -> None:
    """Register the build's schema in Hydra's ConfigStore (idempotent); _config.register_configs
    registers the deployments' schema beside it."""
    global _registered
    if _registered:
        return
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="rbln_build_schema", node=BuildConf)
    _registered = True


def schema_field_names(schema: str) -> list[str]:
    """The field names of the schema class called ``schema`` (empty when there is none): what a
    misspelt key's "did you mean" is chosen from."""
    import dataclasses

    # the deployment's schema lives beside its reader, which imports this module: looked up without
    # an import (it is loaded whenever a config was composed: register_configs registers it)
    cls = globals().get(schema) or getattr(sys.modules.get(f"{__package__}._deployment"), schema, None)
    return (
        sorted(f.name for f in dataclasses.fields(cls))
        if isinstance(cls, type) and dataclasses.is_dataclass(cls)
        else []
    )


_NO_KEY = re.compile(r"Could not override '([^']+)'\..*?Key '([^']+)' not in '(\w+)'")
_NO_OPTION = re.compile(
    r"Could not find '([^'/]+)/([^']*)'.*?Available options in '[^']+':\s*(.*?)\s*Config search path"
)


def closest_names(message: str) -> str | None:
    """Hydra's text for a misspelt key (``budgt=0.3``, ``matrix.budgts=[...]``) or group option
    (``device=rebel10``) as one line with the closest names; None for any other message."""
    import difflib

    found = _NO_KEY.search(message)
    if found is not None:
        override, key, schema = found.groups()
        names = schema_field_names(schema)
        parts = override.split(".")
        if key in parts:  # the missing key may be above the override's last part (a.b.c where a has no b)
            override = ".".join(parts[: parts.index(key) + 1])
        parent = override.rsplit(".", 1)[0] + "." if "." in override else ""
        close = [parent + n for n in difflib.get_close_matches(key, names, n=3, cutoff=0.6)]
        if close:
            hint = f"did you mean {' or '.join(close)}?"
        else:
            section = parent.rstrip(".") or "the root config"
            hint = (
                f"the keys there: {', '.join(names)}."
                if names
                else f"{section} has no keys to set one by one; set it whole ({section}={{KEY:VALUE,...}})."
            )
        return f"{override}: no such key; {hint}"
    found = _NO_OPTION.search(message)
    if found is not None:
        group, option, listed = found.groups()
        options = listed.split()
        if not option:  # `deployment=`: an empty value, e.g. a variable unset
            return f"{group}=: empty; choose one of its options ({', '.join(options)})."
        close = difflib.get_close_matches(option, options, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(f'{group}={c}' for c in close)}? " if close else ""
        return f"{group}={option}: no such option; {hint}(the options: {', '.join(options)})"
    return None


def merge_structured(schema: type, node: Any, where: str, tail: str = "") -> DictConfig:
    """``node`` merged over the structured ``schema``; what OmegaConf refuses (a wrong type, an
    unknown key) is a ConfigError naming ``where`` and the key, its first line, then ``tail``."""
    try:
        return OmegaConf.merge(OmegaConf.structured(schema), node)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        first = str(getattr(exc, "msg", None) or exc).splitlines()[0]
        raise ConfigError(f"{where}{'.' + str(key) if key else ''}: {first}{tail}") from None
