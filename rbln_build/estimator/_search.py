"""The two searches over a pool: the most blocks a budget holds, and the least budget N blocks need.

Both read a ``Pool`` (``_pool``) and nothing else; the estimate and its breakdown read them.

* ``largest_fitting(pool, per_chiplet, limit)``: the full pool (``limit``) if it fits, else a binary
  search over [1, limit - 1], as optimum-rbln 0.12.0's ``_search_num_kvcache_blocks`` does; 0 when not
  even one block fits (0.12.0 would answer 1). Exact, because what N blocks need never decreases.
* ``smallest_budget(pool, n, num_chiplets)``: the smallest per-device budget B whose share
  ``B // num_chiplets`` holds what the tightest bucket needs at N: ``need * num_chiplets`` (at least 1).

Answers are kept per (pool, arguments) in a bounded cache: a matrix asks the same questions of a few
pools many times. The cache holds pools (small), never the reports they were reduced from.
"""

from __future__ import annotations

import functools

from ._pool import Bucket, Pool, pool_for
from ._report import AllocationReport

__all__ = ["largest_fitting", "smallest_budget", "max_blocks_within", "min_budget_for_blocks"]


@functools.lru_cache(maxsize=65_536)
def largest_fitting(pool: Pool, per_chiplet: int, limit: int) -> int:
    """Largest N in [0, ``limit``] with N blocks fitting ``per_chiplet`` bytes on every bucket."""
    if limit <= 0 or pool.fits(limit, per_chiplet):
        return max(limit, 0)
    best, lo, hi = 0, 1, limit - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if pool.fits(mid, per_chiplet):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def smallest_budget(pool: Pool, num_blocks: int, num_chiplets: int) -> tuple[int, Bucket | None]:
    """The smallest per-device budget at which ``num_blocks`` fit, and the bucket that sets it.

    ``B // C >= m`` holds exactly when ``B >= m * C``, so the answer is exact: N fits at it and not at
    one byte less (budgets are at least 1 byte). It may exceed what the device offers.
    """
    need, tightest = pool.need(num_blocks)
    return max(1, need * num_chiplets), tightest


def max_blocks_within(
    report: AllocationReport, budget_bytes: int, num_chiplets: int, limit: int, current_blocks: int | None = None
) -> int:
    """Largest count in [0, ``limit``] that fits under a per-device budget (0: not even one block)."""
    return largest_fitting(pool_for(report, current_blocks), budget_bytes // num_chiplets, limit)


def min_budget_for_blocks(
    report: AllocationReport, num_blocks: int, num_chiplets: int, current_blocks: int | None = None
) -> int:
    """The exact smallest per-device budget (bytes) at which ``num_blocks`` fit: it fits at that budget
    and not at one byte less (unless it is 1). It may exceed what the device offers."""
    return smallest_budget(pool_for(report, current_blocks), num_blocks, num_chiplets)[0]
