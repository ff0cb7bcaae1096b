"""Block arithmetic over an AllocationReport: the estimator's private engine.

A report is reduced once to per-(node, chiplet) buckets (``Pool``): each bucket's non-KV bytes, the
2 MiB-aligned bytes of its fixed (non-resizable) KV tensors, and its resizable KV tensors grouped by
bytes per block (``size // current_blocks``). A count of N blocks fits when every bucket holds its
non-KV bytes plus its KV bytes at N, each resizable tensor scaled to N and rounded up to 2 MiB
*after* scaling. KV bytes never decrease as N grows, so "fits" is monotone: the largest fitting count
is a binary search and the smallest budget for N is exact. Pools are cached per report object.

Pure integer arithmetic: no validation (``rbln_build.estimator._search`` checks reports and requests first,
and owns every error message), no I/O, no torch. The public names are re-exported by
``rbln_build.estimator._search``; import them from there.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from ._report import AllocationReport

__all__ = [
    "ALIGNMENT",
    "Bucket",
    "Pool",
    "align_2mib",
    "cached_pool",
    "pool_for",
    "kv_bytes_at",
    "fits",
    "max_blocks_within",
    "min_budget_for_blocks",
]

ALIGNMENT = 2**21  # every KV tensor is rounded up to 2 MiB after scaling


def align_2mib(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of 2 MiB (exact integer arithmetic)."""
    return -(-nbytes // ALIGNMENT) * ALIGNMENT

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
    """A report reduced to per-(node, chiplet) buckets at a given ``current_blocks``."""

    __slots__ = ("buckets", "grid_shape", "profiles", "memo", "validated")

    def __init__(self, buckets: tuple[Bucket, ...], grid_shape: tuple[int, ...]) -> None:
        self.buckets = buckets
        self.grid_shape = grid_shape  # number of chiplets per node
        # Distinct (constant bytes, KV groups) over buckets: tensor-parallel nodes are usually identical,
        # and whether N fits only depends on the distinct ones.
        self.profiles = tuple(sorted({(b.non_kv + b.fixed, b.groups) for b in buckets}))
        self.memo: dict[Any, Any] = {}  # answers that depend on the report alone (grids, budgets, searches)
        self.validated: set[tuple[int, int]] = set()  # (num_devices, num_chiplets) shapes already checked

    def remember(self, key: Any, compute: Any) -> Any:
        if key not in self.memo:
            if len(self.memo) >= 65_536:
                self.memo.clear()
            self.memo[key] = compute()
        return self.memo[key]

    @classmethod
    def build(cls, report: AllocationReport, current_blocks: int) -> "Pool":
        non_kv = report.non_kv_per_chiplet()
        fixed: dict[tuple[int, int], int] = {}
        per_block: dict[tuple[int, int], int] = {}
        groups: dict[tuple[int, int], dict[int, int]] = {}
        for tensor in report.kv_tensors.values():
            for node, row in enumerate(tensor.sizes):
                if tensor.can_resize:
                    for chiplet, size in enumerate(row):
                        unit = size // current_blocks
                        key = (node, chiplet)
                        per_block[key] = per_block.get(key, 0) + unit
                        sizes = groups.get(key)
                        if sizes is None:
                            sizes = groups[key] = {}
                        sizes[unit] = sizes.get(unit, 0) + 1
                else:
                    for chiplet, size in enumerate(row):
                        key = (node, chiplet)
                        fixed[key] = fixed.get(key, 0) + align_2mib(size)
        keys = sorted(set(non_kv) | set(fixed) | set(groups))
        shape: dict[int, int] = {}
        for node, chiplet in keys:
            shape[node] = max(shape.get(node, 0), chiplet + 1)
        buckets = tuple(
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
        return cls(buckets, tuple(shape.get(n, 0) for n in range(max(shape, default=-1) + 1)))

    def fits(self, num_blocks: int, per_chiplet: int) -> bool:
        for constant, groups in self.profiles:
            total = constant
            for per_block, count in groups:
                total += count * (-(-(per_block * num_blocks) // ALIGNMENT) * ALIGNMENT)
            if total > per_chiplet:
                return False
        return True

    def max_blocks(self, per_chiplet: int, limit: int) -> int:
        """Largest N in [0, limit] that fits (0 when not even one block does): full pool first, then
        binary search, as the reference does; exact because ``need`` is non-decreasing in N."""
        return int(self.remember(("max", per_chiplet, limit), lambda: self._search(per_chiplet, limit)))

    def _search(self, per_chiplet: int, limit: int) -> int:
        if limit <= 0 or self.fits(limit, per_chiplet):
            return max(limit, 0)
        best, lo, hi = 0, 1, limit - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            if self.fits(mid, per_chiplet):
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        return best

    def min_budget(self, num_blocks: int, num_chiplets: int) -> tuple[int, Bucket | None]:
        """Smallest per-device budget B with ``B // num_chiplets >= need`` on every bucket, and the
        bucket that sets it. ``B // C >= m`` holds exactly when ``B >= m * C``; budgets are >= 1."""
        need, tightest = self.tightest(num_blocks)
        return max(1, need * num_chiplets), tightest

    def tightest(self, num_blocks: int) -> tuple[int, Bucket | None]:
        """The most bytes any bucket needs at ``num_blocks``, and the first bucket that needs them."""

        def compute() -> tuple[int, Bucket | None]:
            bucket = max(self.buckets, key=lambda b: b.need(num_blocks), default=None)
            return (0, None) if bucket is None else (bucket.need(num_blocks), bucket)

        result: tuple[int, Bucket | None] = self.remember(("tightest", num_blocks), compute)
        return result

    def headroom(self, num_blocks: int, per_chiplet: int) -> tuple[int | None, Bucket | None]:
        need, tightest = self.tightest(num_blocks)
        if tightest is None:
            return None, None
        return per_chiplet - need, tightest

    def grid(self, value: Any) -> tuple[tuple[int, ...], ...]:
        """``value(bucket)`` laid out as [[per chiplet] per node] (0 where a bucket is absent)."""
        by_key = {(b.node, b.chiplet): value(b) for b in self.buckets}
        return tuple(tuple(by_key.get((n, c), 0) for c in range(width)) for n, width in enumerate(self.grid_shape))

    def kv_grid(self, num_blocks: int) -> tuple[tuple[int, ...], ...]:
        grid: tuple[tuple[int, ...], ...] = self.remember(
            ("kv", num_blocks), lambda: self.grid(lambda b: b.kv(num_blocks))
        )
        return grid

    def static_grid(self, name: str) -> tuple[tuple[int, ...], ...]:
        """The non-KV, per-block and fixed grids: computed once per report."""
        grid: tuple[tuple[int, ...], ...] = self.remember(
            ("grid", name), lambda: self.grid(lambda b: getattr(b, name))
        )
        return grid


# Reports are immutable by contract; a matrix resolves many cells against a few cached reports, so the
# reduced form is kept per report object (weakly: it goes when the report goes).
_POOLS: dict[tuple[int, int], tuple[weakref.ref[AllocationReport], Pool]] = {}


def cached_pool(report: AllocationReport, current_blocks: int) -> Pool | None:
    """The pool already reduced from this very report object, or None."""
    hit = _POOLS.get((id(report), current_blocks))
    return hit[1] if hit is not None and hit[0]() is report else None


def pool_for(report: AllocationReport, current_blocks: int) -> Pool:
    """The report's pool: cached, else reduced now (assumes a report whose sizes are integers)."""
    pool = cached_pool(report, current_blocks)
    if pool is not None:
        return pool
    key = (id(report), current_blocks)
    pool = Pool.build(report, current_blocks)
    if len(_POOLS) >= 1024:
        _POOLS.clear()
    _POOLS[key] = (weakref.ref(report, lambda _ref, k=key: _POOLS.pop(k, None)), pool)
    return pool


def _current(report: AllocationReport, current_blocks: int | None) -> int:
    return report.current_blocks if current_blocks is None else current_blocks


def kv_bytes_at(
    report: AllocationReport, num_blocks: int, current_blocks: int | None = None
) -> dict[tuple[int, int], int]:
    """KV bytes per (node, chiplet) at ``num_blocks``: each resizable tensor ``size // current_blocks
    * num_blocks``, each fixed tensor its size, every tensor rounded up to 2 MiB after scaling.
    ``current_blocks`` defaults to the report's own."""
    pool = pool_for(report, _current(report, current_blocks))
    return {(b.node, b.chiplet): b.kv(num_blocks) for b in pool.buckets}


def fits(
    report: AllocationReport, num_blocks: int, budget_bytes: int, num_chiplets: int, current_blocks: int | None = None
) -> bool:
    """Whether ``num_blocks`` fit on every (node, chiplet) under a per-device budget."""
    return pool_for(report, _current(report, current_blocks)).fits(num_blocks, budget_bytes // num_chiplets)


def max_blocks_within(
    report: AllocationReport, budget_bytes: int, num_chiplets: int, limit: int, current_blocks: int | None = None
) -> int:
    """Largest count in [0, ``limit``] that fits under a per-device budget (0: not even one block)."""
    return pool_for(report, _current(report, current_blocks)).max_blocks(budget_bytes // num_chiplets, limit)


def min_budget_for_blocks(
    report: AllocationReport, num_blocks: int, num_chiplets: int, current_blocks: int | None = None
) -> int:
    """The exact smallest per-device budget (bytes) at which ``num_blocks`` fit: it fits at that budget
    and not at one byte less (unless it is 1). It may exceed what the device offers."""
    return pool_for(report, _current(report, current_blocks)).min_budget(num_blocks, num_chiplets)[0]
