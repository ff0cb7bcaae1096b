"""Checks of configuration values that become names, paths or allocations (docs/security.md), and of
the matrix's list values (budgets, block counts, names: each item checked, an empty list refused).

Each raises ``ConfigError`` naming the key, so that a bad value stops the run at composition (exit
2, nothing written). The rules themselves (the identifier pattern, the bounds) live in
``rbln_build.estimator._limits``, shared with the recipe loader.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError, EstimateError
from ..estimator import check_budget, count_problem, name_problem

__all__ = [
    "check_name",
    "check_count",
    "check_options",
    "check_build_dir",
    "expected_failure_fields",
    "PSEUDO_FILESYSTEMS",
    "check_budgets",
    "check_blocks",
    "check_names",
    "check_partition",
    "same_budget",
]

# Paths under build_dir reach about 400 bytes (cache/<kind>/<64-hex key>/files/..., artifacts/<200-byte
# cell id> and its temporary sibling), so build_dir keeps that much room below PATH_MAX.
PATH_MAX_BYTES = 4096
MAX_BUILD_DIR_BYTES = PATH_MAX_BYTES - 1024
MAX_COMPONENT_BYTES = 255
PSEUDO_FILESYSTEMS = (Path("/proc"), Path("/sys"), Path("/dev"))  # never a place for a build directory
_COUNT_OPTIONS = ("batch_size", "max_seq_len", "kvcache_partition_len", "kvcache_block_size", "prefill_chunk_size")
_ATTN_IMPLS = ("eager", "flash_attn")


def check_name(where: str, value: object) -> str:
    """``value`` if it is an identifier (rbln_build.estimator._limits); else a ConfigError at ``where``."""
    problem = name_problem(value)
    if problem is not None:
        raise ConfigError(f"{where}: {problem}.")
    return value  # type: ignore[return-value]


def check_count(where: str, key: str, value: object, zero_ok: bool = False) -> int:
    """``value`` if it is a count within ``key``'s bound; else a ConfigError at ``where``."""
    problem = count_problem(key, value, zero_ok=zero_ok)
    if problem is not None:
        raise ConfigError(f"{where}: {problem}.")
    return value  # type: ignore[return-value]


def check_options(where: str, options: Mapping[str, Any]) -> None:
    """Build options (a model config's or a recipe's): every count bounded, attn_impl a known name."""
    for key, value in options.items():
        if value is None:
            continue
        if key in _COUNT_OPTIONS:
            check_count(f"{where}.{key}", key, value)
        elif key == "attn_impl" and value not in _ATTN_IMPLS:
            raise ConfigError(f"{where}.attn_impl: expected one of {', '.join(_ATTN_IMPLS)} or null, got {value!r}.")


def check_build_dir(value: object, cwd: Path) -> Path:
    """The build directory ``value`` names (relative to ``cwd``), if a build can be written there: not
    empty, not a file, not under a file, not in a pseudo file system. Nothing is created here."""
    text = "" if value is None else str(value)
    if not text.strip():
        raise ConfigError("build_dir: is empty; give a directory (the default is build, relative to the current one).")
    if "\0" in text:
        raise ConfigError(f"build_dir: {text!r} holds a NUL character; give a directory.")
    path = Path(text)
    path = path if path.is_absolute() else cwd / path
    too_long = [part for part in path.parts if len(os.fsencode(part)) > MAX_COMPONENT_BYTES]
    if too_long:
        raise ConfigError(
            f"build_dir: the folder name {too_long[0][:40]!r}... is {len(os.fsencode(too_long[0]))} bytes, over the "
            f"file-system limit of {MAX_COMPONENT_BYTES}; choose a shorter build_dir."
        )
    if len(os.fsencode(str(path))) > MAX_BUILD_DIR_BYTES:
        raise ConfigError(
            f"build_dir: {str(path)[:60]!r}... is {len(os.fsencode(str(path)))} bytes long, over the limit of "
            f"{MAX_BUILD_DIR_BYTES} (the paths the build writes under it must fit the system's {PATH_MAX_BYTES}); "
            "choose a shorter build_dir."
        )
    try:
        existing = path
        while not existing.exists() and not existing.is_symlink() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            where = "is" if existing == path else f"is under {existing}, which is"
            raise ConfigError(f"build_dir: {path} {where} a file, not a directory; choose another build_dir.")
        real = existing.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python 3.11's resolve)
        raise ConfigError(f"build_dir: {path} cannot be used ({exc}); choose another build_dir.") from None
    for pseudo in PSEUDO_FILESYSTEMS:
        if real == pseudo or pseudo in real.parents:
            raise ConfigError(f"build_dir: {path} is in {pseudo}, a pseudo file system; choose another build_dir.")
    return path


def expected_failure_fields(where: str, entry: Any) -> tuple[str, str, str | None]:
    """(cell, kind, message) of one ``matrix.expect_failure`` entry; a missing or empty cell or kind
    is a ConfigError naming the entry's key."""
    from omegaconf import OmegaConf

    values: dict[str, Any] = {}
    for key in ("cell", "kind"):
        if OmegaConf.is_missing(entry, key) or entry[key] is None or not str(entry[key]).strip():
            raise ConfigError(
                f"{where}.{key}: missing; an expected failure names its cell and the error kind it fails with "
                "(e.g. {cell: qwen3_8b.atom_max_x4.b0.3, kind: insufficient_memory})."
            )
        values[key] = str(entry[key])
    message = entry.get("message")
    return values["cell"], values["kind"], None if message is None else str(message)


# The matrix's list values: each item checked, an empty list refused (it would build nothing)


def check_budgets(where: str, values: Any, scalar: bool = False) -> tuple[Any, ...]:
    """Budget values as typed; a malformed form is a ConfigError at ``where[i]`` (``where`` if scalar)."""
    out = tuple(values)
    if not out:
        raise ConfigError(f"{where}: an empty list builds nothing; give at least one value.")
    for i, b in enumerate(out):
        if isinstance(b, (list, dict)):
            raise ConfigError(f"{where}[{i}]: a budget is null, a number or a string, got {b!r}.")
        try:
            check_budget(b)  # the form only: whether it fits a device's DRAM is a per-cell result
        except EstimateError as exc:
            raise ConfigError(f"{where if scalar else f'{where}[{i}]'}: {exc}") from None
    return out


def check_blocks(where: str, values: Any) -> tuple[int, ...]:
    out = tuple(values)
    for i, b in enumerate(out):
        check_count(f"{where}[{i}]", "kvcache_num_blocks", b, zero_ok=True)
    if not out:
        raise ConfigError(f"{where}: an empty list builds nothing; use [0] for auto.")
    return out


def check_names(where: str, values: Any) -> list[str]:
    out = list(values)
    if not out:
        raise ConfigError(f"{where}: an empty list builds nothing; give at least one value.")
    return out


def check_partition(where: str, value: Any) -> int | None:
    return None if value is None else check_count(where, "kvcache_partition_len", value)


def same_budget(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # typed: 1 (one byte) is not 1.0 (100%)
