"""Why the estimator answered what it did: the breakdown, built from the pool and the search.

The breakdown reads the pool's grids and the search's answers (``_search``); it decides nothing.
Grids are ``[[bytes per chiplet] per node]``, one row per node of the report or of the request,
whichever has more (a node the report does not mention occupies nothing: its row is zeros).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from ._attention import AttentionConfig
from ._budget import fraction_for_bytes
from ._npu import NpuTarget
from ._pool import Pool
from ._report import Grid
from ._search import smallest_budget

__all__ = ["BudgetAnswer", "Breakdown", "budget_answer", "explain"]


@dataclass(frozen=True)
class BudgetAnswer:
    """The smallest per-device budget at which ``blocks`` blocks fit, or why none exists."""

    blocks: int
    required_bytes: int  # per device; may exceed the available DRAM
    bytes: int | None  # per device; None when required_bytes exceeds the available DRAM
    fraction: float | None  # smallest float memory_budget that resolves to >= bytes; None likewise
    reason: str | None  # plain statement why no budget works; None when one does

    def to_json(self) -> dict[str, Any]:
        return {
            "blocks": self.blocks,
            "required_bytes": self.required_bytes,
            "bytes": self.bytes,
            "fraction": self.fraction,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Breakdown:
    """Why the estimator answered what it did. Grids are ``[[bytes per chiplet] per node]``."""

    npu: str
    num_chiplets: int
    available_bytes: int  # per device
    budget_bytes: int | None  # per device; None when the budget was rejected
    budget_per_chiplet: int | None
    non_kv_bytes: Grid
    kv_bytes_per_block: Grid  # resizable tensors, per block, before alignment
    kv_fixed_bytes: Grid  # non-resizable tensors, 2 MiB-aligned
    max_fitting_blocks: int | None  # largest count <= full pool that fits the budget (0: none)
    headroom_blocks: int | None  # the count the headroom and kv_bytes are given at
    kv_bytes: Grid | None  # 2 MiB-aligned KV bytes at headroom_blocks
    headroom_bytes: int | None  # budget_per_chiplet - non-KV - KV on the tightest chiplet (< 0: over)
    tightest_chiplet: tuple[int, int] | None  # (node, chiplet) with the least headroom
    budget_for_floor: BudgetAnswer
    budget_for_full_pool: BudgetAnswer

    def to_json(self) -> dict[str, Any]:
        def grid(g: Grid | None) -> list[list[int]] | None:
            return None if g is None else [list(row) for row in g]

        return {
            "npu": self.npu,
            "num_chiplets": self.num_chiplets,
            "available_bytes": self.available_bytes,
            "budget_bytes": self.budget_bytes,
            "budget_per_chiplet": self.budget_per_chiplet,
            "non_kv_bytes": grid(self.non_kv_bytes),
            "kv_bytes_per_block": grid(self.kv_bytes_per_block),
            "kv_fixed_bytes": grid(self.kv_fixed_bytes),
            "max_fitting_blocks": self.max_fitting_blocks,
            "headroom_blocks": self.headroom_blocks,
            "kv_bytes": grid(self.kv_bytes),
            "headroom_bytes": self.headroom_bytes,
            "tightest_chiplet": None if self.tightest_chiplet is None else list(self.tightest_chiplet),
            "budget_for_floor": self.budget_for_floor.to_json(),
            "budget_for_full_pool": self.budget_for_full_pool.to_json(),
        }


@functools.lru_cache(maxsize=16_384)
def budget_answer(pool: Pool, npu: NpuTarget, num_blocks: int, what: str) -> BudgetAnswer:
    """The smallest budget for ``num_blocks`` (``what``: "the floor", "the full pool") on ``npu``."""
    required, tightest = smallest_budget(pool, num_blocks, npu.num_chiplets)
    available = npu.available_bytes
    if required <= available:
        return BudgetAnswer(num_blocks, required, required, fraction_for_bytes(required, available), None)
    where = "" if tightest is None else f" (node {tightest.node}, chiplet {tightest.chiplet})"
    reason = (
        f"No budget gives {what} ({num_blocks} blocks) on {npu.name}: the tightest chiplet{where} needs "
        f"{required // npu.num_chiplets} bytes, i.e. {required} bytes per device over {npu.num_chiplets} "
        f"chiplet(s), more than the {available} bytes the device has available."
    )
    return BudgetAnswer(num_blocks, required, None, None, reason)


def _rows(grid: Grid, rows: int, width: int) -> Grid:
    """``grid`` with zero rows appended up to ``rows`` (nodes the report does not mention)."""
    return grid if len(grid) >= rows else grid + ((0,) * width,) * (rows - len(grid))


def explain(
    pool: Pool,
    npu: NpuTarget,
    budget: int | None,
    attention: AttentionConfig,
    max_fit: int | None,
    counted_at: int | None,
    num_devices: int,
) -> Breakdown:
    """The breakdown of a resolution on ``npu`` (the target as resolved against the report).

    ``max_fit`` is the search's answer under ``budget`` (None when the budget was rejected);
    ``counted_at`` the block count the headroom is given at (the count resolved or set, else ``max_fit``).
    """
    per_chiplet = None if budget is None else budget // npu.num_chiplets
    headroom_blocks = max_fit if counted_at is None else counted_at
    headroom: int | None = None
    tightest: tuple[int, int] | None = None
    if per_chiplet is not None and headroom_blocks is not None:
        need, bucket = pool.need(headroom_blocks)
        if bucket is None:  # an empty report: nothing is allocated anywhere
            headroom, tightest = per_chiplet, (0, 0)
        else:
            headroom, tightest = per_chiplet - need, (bucket.node, bucket.chiplet)
    rows, width = max(pool.num_nodes, num_devices), npu.num_chiplets
    return Breakdown(
        npu=npu.name,
        num_chiplets=npu.num_chiplets,
        available_bytes=npu.available_bytes,
        budget_bytes=budget,
        budget_per_chiplet=per_chiplet,
        non_kv_bytes=_rows(pool.non_kv_grid, rows, width),
        kv_bytes_per_block=_rows(pool.per_block_grid, rows, width),
        kv_fixed_bytes=_rows(pool.fixed_grid, rows, width),
        max_fitting_blocks=max_fit,
        headroom_blocks=headroom_blocks,
        kv_bytes=None if headroom_blocks is None else _rows(pool.kv_grid(headroom_blocks), rows, width),
        headroom_bytes=headroom,
        tightest_chiplet=tightest,
        budget_for_floor=budget_answer(pool, npu, attention.num_min_blocks, "the floor"),
        budget_for_full_pool=budget_answer(pool, npu, attention.num_full_blocks, "the full pool"),
    )
