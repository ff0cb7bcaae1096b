"""``shard=I/N``: this run builds a deterministic 1/N of the matrix's compile keys (CI without Ray).

Every shard composes the whole matrix and computes the same assignment from it: the compile keys
sorted by the memory model's size estimate (the weight bytes of the recipe: its parameter count from
the inventory, times the weight width), largest first, each given to the shard with the least
estimated bytes so far (ties: the lower shard number; keys of equal size: in key order). The shard
then builds the cells of its keys, and uploads every entry to ``cache.remote``. A final run over the
whole matrix with the same remote (no ``shard``) finds every compile and artifact there, compiles
nothing, and writes the one manifest, byte-identical to a single build's.

Cells that cannot be compiled (no compile key: an invalid option for the NPU) go to shard 1; they are
recorded failures, cheap anywhere.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from ._matrix import Cell

__all__ = ["parse_shard", "assign", "select"]

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")
MAX_SHARDS = 10_000  # more machines than any CI runs; the assignment keeps a list of N loads


def parse_shard(value: Any, remote: str | None, writes: bool) -> tuple[int, int] | None:
    """``shard`` of the config as (I, N), checked; ``merge/N`` is (0, N). Raises ConfigError."""
    if value is None:
        return None
    text = str(value).strip()[:100]
    merge = text.startswith("merge/")  # merge/N: the merge run (rbln_build.commands._shards._merge)
    match = _SHARD.fullmatch("1" + text[5:] if merge else text)
    digits = match is not None and max(len(match.group(1)), len(match.group(2))) <= 7  # int() of 5,000 digits fails
    if match is None or not digits or not 1 <= int(match.group(1)) <= int(match.group(2)) <= MAX_SHARDS:
        raise ConfigError(
            f"shard: expected I/N with 1 <= I <= N <= {MAX_SHARDS:,} (such as shard=3/8), or merge/N for the merge "
            f"run, got {str(value)[:60]!r}."
        )
    if merge and remote is not None:
        return 0, int(match.group(2))  # 0: the merge, which only reads the remote
    if remote is None or not writes:
        raise ConfigError(
            f"shard={value}: a shard's entries reach the merge run only through a shared remote cache; "
            "set cache.remote=URL (with cache.remote_mode=readwrite) in every shard and in the merge run."
        )
    return int(match.group(1)), int(match.group(2))


def _size(cell: Cell, cache_dir: Path | None) -> int:
    """The memory model's estimate of what a compile of ``cell`` handles: its weight bytes."""
    from ..memory import inventory_for_recipe

    try:
        params = inventory_for_recipe(cell.recipe, cache_dir).total_parameters
    except Exception:  # a recipe the inventory cannot read fails at its compile; size it as 0 here
        return 0
    return params * cell.recipe.weight_bits // 8


def assign(cells: list[Cell], shards: int, cache_dir: Path | None = None) -> dict[str, int]:
    """compile key -> shard (1-based), the same in every shard of one matrix."""
    sizes: dict[str, int] = {}
    for cell in cells:
        if cell.compile_key is not None and cell.compile_key not in sizes:
            sizes[cell.compile_key] = _size(cell, cache_dir)
    load = [0] * shards
    out: dict[str, int] = {}
    for key in sorted(sizes, key=lambda k: (-sizes[k], k)):
        target = min(range(shards), key=lambda i: (load[i], i))
        out[key] = target + 1
        load[target] += max(sizes[key], 1)
    return out


def select(cells: list[Cell], shard: tuple[int, int], cache_dir: Path | None = None) -> tuple[list[Cell], int]:
    """The cells of shard ``I/N`` (in matrix order) and the number of compile keys of the matrix."""
    index, count = shard
    owner = assign(cells, count, cache_dir)
    mine = [c for c in cells if (owner[c.compile_key] if c.compile_key is not None else 1) == index]
    return mine, len(owner)
