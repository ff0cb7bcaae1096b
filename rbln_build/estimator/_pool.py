"""A report reduced once to per-(node, chiplet) buckets: the bottom layer of the estimator.

``Pool.of(report, current_blocks)`` sums the report the way optimum-rbln 0.12.0's
``_collect_chiplet_kvcache_inputs`` does:

* the buckets are the union of every (node, chiplet) that a non-``DramTensor`` allocation of any
  graph or a KV tensor mentions; a graph or key that leaves a bucket out contributes 0 to it;
* the report's chiplet count is its largest chiplet index + 1, its node count its largest node
  index + 1 (both 0 for a report without buckets, which says nothing about the device's shape);
* each bucket keeps its non-KV bytes, the 2 MiB-aligned bytes of its fixed (non-resizable) KV tensors,
  and its resizable KV tensors grouped by bytes per block (``size // current_blocks``).

N blocks need, on a bucket, its non-KV bytes plus its KV bytes at N, each resizable tensor scaled to
N and rounded up to 2 MiB *after* scaling. That never decreases as N grows, which is what makes the
searches in ``_search`` exact. The grids (non-KV, KV per block, fixed KV) are computed when the pool
is built; what N blocks need is computed when first asked and kept. A pool never calls upward: the
search reads it, and nothing hands it code to run.

Pools are kept per report object (reports are immutable by contract), so a matrix of many cells over
a few reports reduces each report once.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TypeVar

from ..errors import EstimateError
from ._report import DRAM_TENSOR_KEY, AllocationReport, Grid
from ._units import ALIGNMENT, align_2mib

__all__ = ["Bucket", "Pool", "pool_for", "kv_bytes_at", "fits"]

_MEMO_LIMIT = 65_536  # answers kept per pool before they are dropped and recomputed
_V = TypeVar("_V")


@dataclass(frozen=True)
class Bucket:
    """One (node, chiplet): its non-KV bytes and how its KV bytes grow with the block count."""

    node: int
    chiplet: int
    non_kv: int
    fixed: int  # aligned bytes of the non-resizable KV tensors
    per_block: int  # unaligned bytes per block of the resizable tensors (for the breakdown)
    groups: tuple[tuple[int, int], ...]  # (bytes per block, number of tensors with that size)

    def kv(self, num_blocks: int) -> int:
        total = self.fixed
        for per_block, count in self.groups:
            total += count * (-(-(per_block * num_blocks) // ALIGNMENT) * ALIGNMENT)
        return total

    def need(self, num_blocks: int) -> int:
        return self.non_kv + self.kv(num_blocks)


class Pool:
    """A report's buckets, shape and grids (``[[bytes per chiplet] per node]``, 0 where absent)."""

    __slots__ = (
        "buckets",
        "num_nodes",
        "num_chiplets",
        "profiles",
        "non_kv_grid",
        "per_block_grid",
        "fixed_grid",
        "_needs",
        "_kv_grids",
    )

    def __init__(self, buckets: tuple[Bucket, ...]) -> None:
        self.buckets = buckets
        # 0 and 0 for a report without buckets: it says nothing about the device's shape
        self.num_nodes = max((b.node for b in buckets), default=-1) + 1
        self.num_chiplets = max((b.chiplet for b in buckets), default=-1) + 1
        # Distinct (constant bytes, KV groups) over buckets: tensor-parallel nodes are usually identical,
        # and whether N fits only depends on the distinct ones.
        self.profiles = tuple(sorted({(b.non_kv + b.fixed, b.groups) for b in buckets}))
        self.non_kv_grid = self._grid({(b.node, b.chiplet): b.non_kv for b in buckets})
        self.per_block_grid = self._grid({(b.node, b.chiplet): b.per_block for b in buckets})
        self.fixed_grid = self._grid({(b.node, b.chiplet): b.fixed for b in buckets})
        self._needs: dict[int, tuple[int, Bucket | None]] = {}
        self._kv_grids: dict[int, Grid] = {}

    @classmethod
    def of(cls, report: AllocationReport, current_blocks: int) -> Pool:
        """Reduce ``report`` (KV sizes measured at ``current_blocks``); raises ``EstimateError``
        (``invalid_report``) for a byte count that is not a non-negative integer."""
        for graph_name, graph in sorted(report.alloc.items()):
            for alloc_key, grid in sorted(graph.items()):
                if alloc_key != DRAM_TENSOR_KEY:
                    _check_counts(grid, f"alloc.{graph_name}.{alloc_key}")
        for name, tensor in sorted(report.kv_tensors.items()):
            _check_counts(tensor.sizes, f"kv_tensors.{name}.sizes")
        non_kv = report.non_kv_per_chiplet()
        fixed: dict[tuple[int, int], int] = {}
        per_block: dict[tuple[int, int], int] = {}
        groups: dict[tuple[int, int], dict[int, int]] = {}
        for tensor in report.kv_tensors.values():
            for node, row in enumerate(tensor.sizes):
                for chiplet, size in enumerate(row):
                    key = (node, chiplet)
                    if tensor.can_resize:
                        unit = size // current_blocks
                        per_block[key] = per_block.get(key, 0) + unit
                        sizes = groups.setdefault(key, {})
                        sizes[unit] = sizes.get(unit, 0) + 1
                    else:
                        fixed[key] = fixed.get(key, 0) + align_2mib(size)
        keys = sorted(set(non_kv) | set(fixed) | set(groups))  # = report.chiplets()
        return cls(
            tuple(
                Bucket(
                    node=n,
                    chiplet=c,
                    non_kv=non_kv.get((n, c), 0),
                    fixed=fixed.get((n, c), 0),
                    per_block=per_block.get((n, c), 0),
                    groups=tuple(sorted(groups.get((n, c), {}).items())),
                )
                for n, c in keys
            )
        )

    def _grid(self, values: dict[tuple[int, int], int]) -> Grid:
        return tuple(tuple(values.get((n, c), 0) for c in range(self.num_chiplets)) for n in range(self.num_nodes))

    def fits(self, num_blocks: int, per_chiplet: int) -> bool:
        """Whether ``num_blocks`` fit on every bucket with ``per_chiplet`` bytes each."""
        for constant, groups in self.profiles:
            total = constant
            for per_block, count in groups:
                total += count * (-(-(per_block * num_blocks) // ALIGNMENT) * ALIGNMENT)
            if total > per_chiplet:
                return False
        return True

    def need(self, num_blocks: int) -> tuple[int, Bucket | None]:
        """The most bytes any bucket needs at ``num_blocks``, and the first bucket that needs them
        (``(0, None)`` for a report without buckets)."""
        hit = self._needs.get(num_blocks)
        if hit is None:
            bucket = max(self.buckets, key=lambda b: b.need(num_blocks), default=None)
            hit = (0, None) if bucket is None else (bucket.need(num_blocks), bucket)
            self._needs[num_blocks] = _kept(self._needs, hit)
        return hit

    def kv_grid(self, num_blocks: int) -> Grid:
        """The 2 MiB-aligned KV bytes of every bucket at ``num_blocks``."""
        grid = self._kv_grids.get(num_blocks)
        if grid is None:
            grid = self._grid({(b.node, b.chiplet): b.kv(num_blocks) for b in self.buckets})
            self._kv_grids[num_blocks] = _kept(self._kv_grids, grid)
        return grid


def _kept(memo: dict[int, _V], value: _V) -> _V:
    """``value``, after making room for it in ``memo`` (cleared when full: answers are recomputable)."""
    if len(memo) >= _MEMO_LIMIT:
        memo.clear()
    return value


def _check_counts(grid: Grid, where: str) -> None:
    """Raise unless every byte count in ``grid`` is a non-negative int (a report built in Python
    bypasses ``AllocationReport.from_json``'s checks)."""
    for node, row in enumerate(grid):
        for nbytes in row:
            if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
                raise EstimateError(
                    f"{where}[{node}]: expected non-negative integer byte counts, got {nbytes!r}.",
                    kind="invalid_report",
                )


# Reports are immutable by contract; a matrix resolves many cells against a few cached reports, so the
# reduced form is kept per report object (weakly: it goes when the report goes).
_POOLS: dict[tuple[int, int], tuple[weakref.ref[AllocationReport], Pool]] = {}


def pool_for(report: AllocationReport, current_blocks: int | None = None) -> Pool:
    """The report's pool at ``current_blocks`` (default: the report's own): kept from an earlier call
    on this very object, else reduced now."""
    if current_blocks is None:
        current_blocks = report.current_blocks
    key = (id(report), current_blocks)
    hit = _POOLS.get(key)
    if hit is not None and hit[0]() is report:
        return hit[1]
    pool = Pool.of(report, current_blocks)
    if len(_POOLS) >= 1024:
        _POOLS.clear()

    def forget(_ref: weakref.ref[AllocationReport]) -> None:
        _POOLS.pop(key, None)

    _POOLS[key] = (weakref.ref(report, forget), pool)
    return pool


def kv_bytes_at(
    report: AllocationReport, num_blocks: int, current_blocks: int | None = None
) -> dict[tuple[int, int], int]:
    """KV bytes per (node, chiplet) at ``num_blocks``: each resizable tensor ``size // current_blocks
    * num_blocks``, each fixed tensor its size, every tensor rounded up to 2 MiB after scaling.
    ``current_blocks`` defaults to the report's own."""
    pool = pool_for(report, current_blocks)
    return {(b.node, b.chiplet): b.kv(num_blocks) for b in pool.buckets}


def fits(
    report: AllocationReport, num_blocks: int, budget_bytes: int, num_chiplets: int, current_blocks: int | None = None
) -> bool:
    """Whether ``num_blocks`` fit on every (node, chiplet) under a per-device budget."""
    return pool_for(report, current_blocks).fits(num_blocks, budget_bytes // num_chiplets)
