"""The KV-cache block estimator: pure arithmetic over an AllocationReport.

Given a request (NPU, geometry, attention options, ``kvcache_num_blocks``, ``memory_budget``) and the
allocations a compiled model reports, ``estimate`` resolves the number of KV-cache blocks exactly as
optimum-rbln 0.12.0 does, and explains the answer (``Breakdown``):

* The budget applies per device (node), resolves against that device's available DRAM
  (``rbln_build.estimator._budget``) and is split evenly over its chiplets: ``budget // num_chiplets``.
* A count of N blocks fits when every (node, chiplet) holds its non-KV bytes plus its KV bytes at N:
  each resizable KV tensor counts ``size // current_blocks * N`` bytes, a fixed (non-resizable)
  tensor its reported size, and each tensor is rounded up to 2 MiB *after* scaling.
* Auto (``kvcache_num_blocks=0``) under flash attention: the full pool if it fits, else the largest
  count that fits. KV bytes never decrease as N grows (a sum of non-decreasing terms), so "fits" is
  monotone and a binary search finds that count, as in the reference. Below the floor is an error.
* Auto under eager attention: always the full pool, whatever the budget (a malformed budget is still
  rejected). An explicit count is kept; under flash attention one below the floor is an error.

Where 0.12.0 is wrong we do better: the insufficient-memory error names the true count (0 when not
even one block fits; 0.12 says 1), and a malformed budget is rejected under eager attention too.

No torch, no transformers, no I/O. ``estimate`` never raises for bad request content: the error is
carried in the ``Resolution`` (``raise_for_error`` turns it into an ``EstimateError``).

This module holds the request and answer types, validation, every error message and the resolution
rules; the block arithmetic over a report (reduction, alignment, fits, the searches) is in the
private ``rbln_build.estimator._pool``, whose public functions are re-exported here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from ._pool import (
    ALIGNMENT,
    Pool,
    align_2mib,
    cached_pool,
    fits,
    kv_bytes_at,
    max_blocks_within,
    min_budget_for_blocks,
    pool_for,
)
from ._attention import AttentionConfig, resolve_attention
from ._budget import budget_hints, fraction_for_bytes, resolve_budget
from ..errors import EstimateError
from ._npu import NpuTarget, resolve_npu
from ._report import AllocationReport

__all__ = [
    "ALIGNMENT",
    "Request",
    "Resolution",
    "Breakdown",
    "BudgetAnswer",
    "estimate",
    "align_2mib",
    "kv_bytes_at",
    "fits",
    "max_blocks_within",
    "min_budget_for_blocks",
]

# --------------------------------------------------------------------------------------------------
# Request / result types


@dataclass(frozen=True)
class Request:
    """One estimation request. Field names and meanings follow optimum-rbln's ``rbln_*`` options."""

    npu: str
    max_seq_len: int
    batch_size: int = 1
    num_devices: int = 1
    attn_impl: str | None = None
    kvcache_partition_len: int | None = None
    kvcache_block_size: int | None = None
    prefill_chunk_size: int | None = None
    kvcache_num_blocks: int = 0  # 0 = auto
    memory_budget: object = None  # raw value; types matter (1 is one byte, 1.0 is 100%)
    current_blocks: int = 1  # block count the report's KV sizes were measured at

    @classmethod
    def for_attention(
        cls,
        npu: str,
        num_devices: int,
        attention: AttentionConfig,
        *,
        memory_budget: object = None,
        kvcache_num_blocks: int = 0,
        current_blocks: int = 1,
    ) -> "Request":
        """A request from already-resolved attention options (e.g. a ``CompileSpec``'s).

        A matrix cell passes its raw options instead, so that the warnings about defaults the
        estimator fills in reach the manifest.
        """
        return cls(
            npu=npu,
            max_seq_len=attention.max_seq_len,
            batch_size=attention.batch_size,
            num_devices=num_devices,
            attn_impl=attention.attn_impl,
            kvcache_partition_len=attention.kvcache_partition_len,
            kvcache_block_size=attention.kvcache_block_size,
            prefill_chunk_size=attention.prefill_chunk_size,
            kvcache_num_blocks=kvcache_num_blocks,
            memory_budget=memory_budget,
            current_blocks=current_blocks,
        )


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
    non_kv_bytes: tuple[tuple[int, ...], ...]
    kv_bytes_per_block: tuple[tuple[int, ...], ...]  # resizable tensors, per block, before alignment
    kv_fixed_bytes: tuple[tuple[int, ...], ...]  # non-resizable tensors, 2 MiB-aligned
    max_fitting_blocks: int | None  # largest count <= full pool that fits the budget (0: none)
    headroom_blocks: int | None  # the count the headroom and kv_bytes are given at
    kv_bytes: tuple[tuple[int, ...], ...] | None  # 2 MiB-aligned KV bytes at headroom_blocks
    headroom_bytes: int | None  # budget_per_chiplet - non-KV - KV on the tightest chiplet (< 0: over)
    tightest_chiplet: tuple[int, int] | None  # (node, chiplet) with the least headroom
    budget_for_floor: BudgetAnswer
    budget_for_full_pool: BudgetAnswer

    def to_json(self) -> dict[str, Any]:
        def grid(g: tuple[tuple[int, ...], ...] | None) -> list[list[int]] | None:
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


@dataclass(frozen=True)
class Resolution:
    """The estimator's answer: a block count, or the error, and always as much explanation as it has."""

    kvcache_num_blocks: int | None
    num_full_blocks: int | None
    num_min_blocks: int | None
    attention: AttentionConfig | None
    breakdown: Breakdown | None
    warnings: tuple[str, ...] = ()
    error: str | None = None
    error_kind: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def raise_for_error(self) -> "Resolution":
        if self.error is not None:
            raise EstimateError(self.error, kind=self.error_kind or "invalid_request")
        return self

    def to_json(self) -> dict[str, Any]:
        """A plain JSON value; every key always present, so the shape never depends on the outcome."""
        return {
            "ok": self.ok,
            "kvcache_num_blocks": self.kvcache_num_blocks,
            "num_full_blocks": self.num_full_blocks,
            "num_min_blocks": self.num_min_blocks,
            "attention": None if self.attention is None else self.attention.to_json(),
            "breakdown": None if self.breakdown is None else self.breakdown.to_json(),
            "warnings": list(self.warnings),
            "error": self.error,
            "error_kind": self.error_kind,
        }


# --------------------------------------------------------------------------------------------------
# Validation


def _invalid(message: str) -> EstimateError:
    return EstimateError(message, kind="invalid_request")


def _check_int(name: str, value: object, minimum: int, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        if optional:
            what += " or null (auto)"
        raise _invalid(f"`{name}` must be {what}, got {value!r}.")


def _check_request(request: object) -> Request:
    if not isinstance(request, Request):
        raise _invalid(f"estimate() expects a Request, got {type(request).__name__}.")
    _check_int("max_seq_len", request.max_seq_len, 1)
    _check_int("batch_size", request.batch_size, 1)
    _check_int("num_devices", request.num_devices, 1)
    _check_int("current_blocks", request.current_blocks, 1)
    _check_int("kvcache_partition_len", request.kvcache_partition_len, 1, optional=True)
    _check_int("kvcache_block_size", request.kvcache_block_size, 1, optional=True)
    chunk = request.prefill_chunk_size
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int)):
        # range and divisibility are checked with the reference's wording by resolve_attention
        raise _invalid(f"`prefill_chunk_size` must be an integer divisible by 64 or null (auto), got {chunk!r}.")
    if isinstance(request.kvcache_num_blocks, bool) or not isinstance(request.kvcache_num_blocks, int) or (
        request.kvcache_num_blocks < 0
    ):
        raise _invalid(
            f"`kvcache_num_blocks` must be 0 (estimate automatically) or a positive integer, "
            f"got {request.kvcache_num_blocks!r}."
        )
    if request.attn_impl is not None and not isinstance(request.attn_impl, str):
        raise _invalid(f"`attn_impl` must be 'eager', 'flash_attn' or null, got {request.attn_impl!r}.")
    return request


# Both are pure functions of a few validated scalars; a matrix asks them the same questions many times.
# (Errors are not cached: lru_cache re-runs a call that raised.)
_resolve_npu = functools.lru_cache(maxsize=64)(resolve_npu)


@functools.lru_cache(maxsize=4096)
def _resolve_attention(
    npu: NpuTarget,
    batch_size: int,
    max_seq_len: int,
    attn_impl: str | None,
    kvcache_partition_len: int | None,
    kvcache_block_size: int | None,
    prefill_chunk_size: int | None,
) -> AttentionConfig:
    return resolve_attention(
        npu,
        batch_size=batch_size,
        max_seq_len=max_seq_len,
        attn_impl=attn_impl,
        kvcache_partition_len=kvcache_partition_len,
        kvcache_block_size=kvcache_block_size,
        prefill_chunk_size=prefill_chunk_size,
    )


def _bad_report(message: str) -> EstimateError:
    return EstimateError(message, kind="invalid_report")


def _checked_pool(report: object, request: Request, npu: NpuTarget) -> Pool:
    """The report's reduced form, after checking it matches the request (shape checked once per report)."""
    if not isinstance(report, AllocationReport):
        raise _bad_report(f"estimate() expects an AllocationReport, got {type(report).__name__}.")
    if report.current_blocks != request.current_blocks:
        raise _bad_report(
            f"The report's KV sizes were measured at current_blocks={report.current_blocks}, but the request "
            f"says current_blocks={request.current_blocks}. Set both to the block count the KV tensors hold."
        )
    shape = (request.num_devices, npu.num_chiplets)
    pool = cached_pool(report, request.current_blocks)
    if pool is None or shape not in pool.validated:
        _check_report_shape(report, request, npu)  # before reducing: the reduction assumes integer sizes
        pool = pool or pool_for(report, request.current_blocks)
        pool.validated.add(shape)
    return pool


def _check_report_shape(report: AllocationReport, request: Request, npu: NpuTarget) -> None:
    bad = _bad_report
    grids = [(f"alloc.{g}.{k}", grid) for g, keys in sorted(report.alloc.items()) for k, grid in sorted(keys.items())]
    grids += [(f"kv_tensors.{name}.sizes", t.sizes) for name, t in sorted(report.kv_tensors.items())]
    for where, grid in grids:
        if len(grid) != request.num_devices:
            raise bad(
                f"{where}: the report has {len(grid)} node row(s) but num_devices is {request.num_devices}; "
                "the report needs one row per device."
            )
        for node, row in enumerate(grid):
            if len(row) != npu.num_chiplets:
                raise bad(
                    f"{where}[{node}]: {len(row)} chiplet value(s), but {npu.name} ({npu.product}) has "
                    f"{npu.num_chiplets} chiplet(s) per device."
                )
            for nbytes in row:
                if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
                    raise bad(f"{where}[{node}]: expected non-negative integer byte counts, got {nbytes!r}.")


# --------------------------------------------------------------------------------------------------
# The estimator


def _insufficient(fitting: int, floor: int, batch_size: int) -> str:
    return (
        f"Insufficient memory for the required KV cache: only {fitting} blocks can be allocated, but at least "
        f"{floor} blocks are required. Consider reducing `max_seq_len` or `batch_size` (currently {batch_size}) "
        "to lower the memory requirement."
    )


def _budget_answer(pool: Pool, npu: NpuTarget, num_blocks: int, what: str) -> BudgetAnswer:
    answer: BudgetAnswer = pool.remember(
        ("answer", npu.name, npu.num_chiplets, npu.available_bytes, num_blocks, what),
        lambda: _compute_budget_answer(pool, npu, num_blocks, what),
    )
    return answer


def _compute_budget_answer(pool: Pool, npu: NpuTarget, num_blocks: int, what: str) -> BudgetAnswer:
    required, tightest = pool.min_budget(num_blocks, npu.num_chiplets)
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


def _breakdown(
    pool: Pool,
    npu: NpuTarget,
    budget: int | None,
    attention: AttentionConfig,
    headroom_blocks: int | None,
    num_devices: int,
) -> Breakdown:
    per_chiplet = None if budget is None else budget // npu.num_chiplets
    max_fit = None if per_chiplet is None else pool.max_blocks(per_chiplet, attention.num_full_blocks)
    if headroom_blocks is None:
        headroom_blocks = max_fit
    headroom: int | None = None
    tightest: tuple[int, int] | None = None
    if per_chiplet is not None and headroom_blocks is not None:
        headroom, bucket = pool.headroom(headroom_blocks, per_chiplet)
        if bucket is None:  # an empty report: nothing is allocated anywhere
            headroom, tightest = per_chiplet, (0, 0)
        else:
            tightest = (bucket.node, bucket.chiplet)
    zeros = tuple((0,) * npu.num_chiplets for _ in range(num_devices))
    if not pool.buckets:
        return Breakdown(
            npu.name, npu.num_chiplets, npu.available_bytes, budget, per_chiplet, zeros, zeros, zeros, max_fit,
            headroom_blocks, None if headroom_blocks is None else zeros, headroom, tightest,
            _budget_answer(pool, npu, attention.num_min_blocks, "the floor"),
            _budget_answer(pool, npu, attention.num_full_blocks, "the full pool"),
        )
    return Breakdown(
        npu=npu.name,
        num_chiplets=npu.num_chiplets,
        available_bytes=npu.available_bytes,
        budget_bytes=budget,
        budget_per_chiplet=per_chiplet,
        non_kv_bytes=pool.static_grid("non_kv"),
        kv_bytes_per_block=pool.static_grid("per_block"),
        kv_fixed_bytes=pool.static_grid("fixed"),
        max_fitting_blocks=max_fit,
        headroom_blocks=headroom_blocks,
        kv_bytes=None if headroom_blocks is None else pool.kv_grid(headroom_blocks),
        headroom_bytes=headroom,
        tightest_chiplet=tightest,
        budget_for_floor=_budget_answer(pool, npu, attention.num_min_blocks, "the floor"),
        budget_for_full_pool=_budget_answer(pool, npu, attention.num_full_blocks, "the full pool"),
    )


def estimate(request: Request, report: AllocationReport) -> Resolution:
    """Resolve ``kvcache_num_blocks`` for ``request`` against ``report``; never raises for bad content."""
    warnings: list[str] = []
    attention: AttentionConfig | None = None
    breakdown: Breakdown | None = None

    def failed(error: EstimateError) -> Resolution:
        return Resolution(
            kvcache_num_blocks=None,
            num_full_blocks=None if attention is None else attention.num_full_blocks,
            num_min_blocks=None if attention is None else attention.num_min_blocks,
            attention=attention,
            breakdown=breakdown,
            warnings=tuple(warnings),
            error=str(error),
            error_kind=error.kind,
        )

    try:
        _check_request(request)
        if request.memory_budget is not None and request.kvcache_num_blocks > 0:
            raise EstimateError(
                "`memory_budget` and an explicit `kvcache_num_blocks` are mutually exclusive. `memory_budget` "
                "only guides automatic block estimation, which runs when `kvcache_num_blocks` is unset.",
                kind="budget_and_blocks_exclusive",
            )
        npu = _resolve_npu(request.npu) if isinstance(request.npu, str) else resolve_npu(request.npu)
        # every argument is an int, None or str here (checked above), so equal keys mean equal inputs
        attention = _resolve_attention(
            npu,
            request.batch_size,
            request.max_seq_len,
            request.attn_impl,
            request.kvcache_partition_len,
            request.kvcache_block_size,
            request.prefill_chunk_size,
        )
        warnings.extend(attention.warnings)
        budget_error: EstimateError | None = None
        try:
            budget: int | None = resolve_budget(request.memory_budget, npu)
        except EstimateError as error:
            budget, budget_error = None, error
        warnings.extend(budget_hints(request.memory_budget))
        try:
            pool = _checked_pool(report, request, npu)
        except EstimateError:
            if budget_error is not None:  # the budget is checked first; its error wins
                raise budget_error from None
            raise
    except EstimateError as error:
        return failed(error)

    full, floor = attention.num_full_blocks, attention.num_min_blocks
    explicit = request.kvcache_num_blocks
    eager = attention.attn_impl == "eager"
    chosen: int | None = explicit if explicit else (full if eager else None)
    breakdown = _breakdown(pool, npu, budget, attention, chosen, request.num_devices)
    if budget_error is not None:
        return failed(budget_error)
    assert budget is not None and breakdown.max_fitting_blocks is not None

    if explicit:
        if explicit > full:
            warnings.append(
                f"The set `kvcache_num_blocks` ({explicit}) is greater than the required number of blocks "
                f"({full}). This can cause a failure during model compilation."
            )
        if explicit < floor:
            if not eager:
                return failed(
                    EstimateError(
                        f"The set `kvcache_num_blocks` ({explicit}) is less than the minimum number of blocks "
                        f"({floor}). Set it to at least {floor}, or to 0 to estimate it from the available "
                        "memory.",
                        kind="blocks_below_floor",
                    )
                )
            warnings.append(
                f"The set `kvcache_num_blocks` ({explicit}) is less than `batch_size` ({floor}) under eager "
                "attention, so not every sequence of a full batch can hold its block at once."
            )
    elif eager:
        if request.memory_budget is not None:
            warnings.append(
                "Under eager attention an unset `kvcache_num_blocks` is always the full pool "
                f"({full} blocks); `memory_budget` was validated but does not change the count."
            )
    else:
        fitting = breakdown.max_fitting_blocks
        if fitting < floor:
            return failed(EstimateError(_insufficient(fitting, floor, attention.batch_size), "insufficient_memory"))
        chosen = fitting
    assert chosen is not None
    if (explicit or eager) and breakdown.headroom_bytes is not None and breakdown.headroom_bytes < 0:
        node, chiplet = breakdown.tightest_chiplet or (0, 0)
        warnings.append(
            f"{chosen} blocks do not fit in the budget of {budget} bytes per device: node {node}, chiplet "
            f"{chiplet} is short by {-breakdown.headroom_bytes} bytes; the artifact may fail to allocate."
        )
    return Resolution(
        kvcache_num_blocks=chosen,
        num_full_blocks=full,
        num_min_blocks=floor,
        attention=attention,
        breakdown=breakdown,
        warnings=tuple(warnings),
    )
