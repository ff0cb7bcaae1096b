"""The numbers behind the figures, from the estimator alone: no matplotlib, no I/O.

* ``blocks_curve``: ``kvcache_num_blocks`` as the per-device budget goes from 0 to the whole device.
  "Fits" is monotone in the block count (``rbln_build.estimator``), so the largest count that fits a
  budget is a step function of the budget whose steps sit exactly at
  ``min_budget_for_blocks(report, N)`` for N = 1 .. full pool. The curve is that list of steps; the
  resolved count is the step's value from the floor on (below it the estimator fails), or the full
  pool whatever the budget under eager attention.
* ``dram_stacks``: per (node, chiplet), the report's non-KV bytes by kind (weights, workspace,
  runtime buffers, anything else) and the 2 MiB-aligned KV bytes at a block count.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from ..errors import EstimateError
from ..estimator import (
    DRAM_TENSOR_KEY,
    AllocationReport,
    Request,
    Resolution,
    estimate,
    kv_bytes_at,
    min_budget_for_blocks,
    resolve_npu,
)

__all__ = ["BlocksCurve", "ChipletStack", "STACK_PARTS", "blocks_curve", "dram_stacks", "request_for"]

STACK_PARTS = ("weights", "workspace", "runtime_buffers", "other", "kv")  # bottom to top
_KNOWN_PARTS = {"weights", "workspace", "runtime_buffers"}
_ATTENTION_KEYS = (
    "attn_impl",
    "batch_size",
    "kvcache_block_size",
    "kvcache_partition_len",
    "max_seq_len",
    "prefill_chunk_size",
)


@dataclass(frozen=True)
class BlocksCurve:
    """The exact blocks-vs-budget step curve of one compile on one NPU (budgets are bytes per device)."""

    npu: str
    num_chiplets: int
    available_bytes: int
    num_full_blocks: int
    num_min_blocks: int
    eager: bool
    steps: tuple[tuple[int, int], ...]  # (budget, blocks that fit from that budget on); starts at (0, 0)
    floor_bytes: int | None  # smallest budget that resolves at least the floor (None: above the device)
    full_bytes: int | None  # smallest budget that resolves the full pool (None: above the device)

    def fitting_at(self, budget_bytes: int) -> int:
        """The largest count that fits ``budget_bytes`` per device (0: not one block)."""
        i = bisect.bisect_right([x for x, _ in self.steps], budget_bytes) - 1
        return self.steps[max(i, 0)][1]

    def blocks_at(self, budget_bytes: int) -> int | None:
        """What the estimator resolves at ``budget_bytes`` (None: it fails, below the floor)."""
        if self.eager:
            return self.num_full_blocks
        fitting = self.fitting_at(budget_bytes)
        return fitting if fitting >= self.num_min_blocks else None


@dataclass(frozen=True)
class ChipletStack:
    node: int
    chiplet: int
    parts: dict[str, int]  # STACK_PARTS -> bytes

    @property
    def total(self) -> int:
        return sum(self.parts.values())


def request_for(
    npu: str, num_devices: int, attention: dict[str, Any], memory_budget: object = None, current_blocks: int = 1
) -> Request:
    """An estimator request from a manifest entry's resolved attention (``inputs.attention``)."""
    missing = [k for k in _ATTENTION_KEYS if k not in attention]
    if missing:
        raise EstimateError(f"attention options are missing {', '.join(missing)}: got {attention!r}", "invalid_request")
    return Request(
        npu=npu,
        max_seq_len=attention["max_seq_len"],
        batch_size=attention["batch_size"],
        num_devices=num_devices,
        attn_impl=attention["attn_impl"],
        kvcache_partition_len=attention["kvcache_partition_len"],
        kvcache_block_size=attention["kvcache_block_size"],
        prefill_chunk_size=attention["prefill_chunk_size"],
        memory_budget=memory_budget,
        current_blocks=current_blocks,
    )


def _resolution(report: AllocationReport, npu: str, num_devices: int, attention: dict[str, Any]) -> Resolution:
    res = estimate(request_for(npu, num_devices, attention, current_blocks=report.current_blocks), report)
    if res.breakdown is None or res.num_full_blocks is None or res.num_min_blocks is None:
        raise EstimateError(res.error or "the estimator gave no breakdown", res.error_kind or "invalid_request")
    return res


def blocks_curve(report: AllocationReport, npu: str, num_devices: int, attention: dict[str, Any]) -> BlocksCurve:
    """The step curve for ``report`` on ``num_devices`` x ``npu`` with the given resolved attention
    options. Raises ``EstimateError`` when the report does not fit the request (wrong shape)."""
    res = _resolution(report, npu, num_devices, attention)
    target = resolve_npu(npu)
    available, chiplets = target.available_bytes, target.num_chiplets
    full, floor = res.num_full_blocks, res.num_min_blocks
    assert res.breakdown is not None and full is not None and floor is not None
    steps: list[tuple[int, int]] = [(0, 0)]
    for n in range(1, full + 1):
        need = min_budget_for_blocks(report, n, chiplets)
        if need > available:
            break
        if need == steps[-1][0]:
            steps[-1] = (need, n)
        else:
            steps.append((need, n))
    return BlocksCurve(
        npu=target.name,
        num_chiplets=chiplets,
        available_bytes=available,
        num_full_blocks=full,
        num_min_blocks=floor,
        eager=attention["attn_impl"] == "eager",
        steps=tuple(steps),
        floor_bytes=res.breakdown.budget_for_floor.bytes,
        full_bytes=res.breakdown.budget_for_full_pool.bytes,
    )


def dram_stacks(report: AllocationReport, num_blocks: int) -> list[ChipletStack]:
    """Per (node, chiplet), sorted: what the report allocates by kind, and the KV bytes at ``num_blocks``."""
    parts: dict[tuple[int, int], dict[str, int]] = {}
    for graph in report.alloc.values():
        for key, grid in graph.items():
            if key == DRAM_TENSOR_KEY:
                continue
            part = key if key in _KNOWN_PARTS else "other"
            for node, row in enumerate(grid):
                for chiplet, nbytes in enumerate(row):
                    bucket = parts.setdefault((node, chiplet), dict.fromkeys(STACK_PARTS, 0))
                    bucket[part] += nbytes
    for where, nbytes in kv_bytes_at(report, num_blocks).items():
        parts.setdefault(where, dict.fromkeys(STACK_PARTS, 0))["kv"] = nbytes
    return [ChipletStack(node, chiplet, parts[(node, chiplet)]) for node, chiplet in sorted(parts)]
