"""The estimate: Request + AllocationReport -> Resolution, the way optimum-rbln 0.12.0 resolves it.

The top layer. It validates the request (``_request``), resolves the NPU, the attention options and the budget,
reduces the report (``_pool``), asks the search (``_search``) how many blocks fit, applies the rules,
and explains the answer (``_breakdown``). Every error message and warning is written here.

* The budget applies per device (node), resolves against that device's available DRAM
  (``_budget``) and is split evenly over its chiplets: ``budget // num_chiplets``.
* The chiplet count is the report's (its largest chiplet index + 1), as in 0.12.0; when it differs
  from the NPU family's, the device DRAM is split over the report's count and a warning says so.
* Auto (``kvcache_num_blocks=0``) under flash attention: the full pool if it fits, else the largest
  count that fits. Below the floor is an error.
* Auto under eager attention: always the full pool, whatever the budget (a malformed budget is still
  rejected). An explicit count is kept; under flash attention one below the floor is an error.

Where 0.12.0 is wrong we do better: the insufficient-memory error names the true count (0 when not
even one block fits; 0.12 says 1), and a malformed budget is rejected under eager attention too.

No torch, no transformers, no I/O. ``estimate`` never raises for bad request content: the error is
carried in the ``Resolution`` (``raise_for_error`` turns it into an ``EstimateError``).
"""

from __future__ import annotations

import functools

from ..errors import EstimateError
from ._attention import AttentionConfig, resolve_attention
from ._breakdown import Breakdown, explain
from ._budget import ParsedBudget, budget_hints, parse_budget
from ._npu import NpuTarget, resolve_npu
from ._pool import Pool, pool_for
from ._report import AllocationReport
from ._request import Request, Resolution, check_request
from ._search import largest_fitting

__all__ = ["Request", "Resolution", "estimate"]  # Request and Resolution: _request


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


def _reduced(report: object, request: Request) -> Pool:
    """The report's pool, once the report is one and was measured where the request says."""
    if not isinstance(report, AllocationReport):
        raise _bad_report(f"estimate() expects an AllocationReport, got {type(report).__name__}.")
    if report.current_blocks != request.current_blocks:
        raise _bad_report(
            f"The report's KV sizes were measured at current_blocks={report.current_blocks}, but the request "
            f"says current_blocks={request.current_blocks}. Set both to the block count the KV tensors hold."
        )
    return pool_for(report, request.current_blocks)


def _shape_warnings(pool: Pool, request: Request, npu: NpuTarget, target: NpuTarget) -> list[str]:
    """What the report's shape differs in from the request's; resolved as 0.12.0 resolves it anyway."""
    warnings = []
    if target.num_chiplets != npu.num_chiplets:
        warnings.append(
            f"The report covers {target.num_chiplets} chiplet(s) per device (its largest chiplet index + 1), "
            f"but {npu.name} ({npu.product}) has {npu.num_chiplets}. Resolved over the report's "
            f"{target.num_chiplets} chiplet(s), as optimum-rbln 0.12.0 does: {npu.dram_bytes} // "
            f"{target.num_chiplets} - {npu.reserved_per_chiplet} reserved = {target.available_per_chiplet} "
            f"bytes available per chiplet, {target.available_bytes} per device."
        )
    if pool.buckets and pool.num_nodes != request.num_devices:
        warnings.append(
            f"The report covers {pool.num_nodes} node(s) (its largest node index + 1), but num_devices is "
            f"{request.num_devices}. Resolved over the report's nodes, as optimum-rbln 0.12.0 does: every "
            "node gets the per-device budget, and a node the report does not mention occupies nothing."
        )
    return warnings


# --------------------------------------------------------------------------------------------------
# The estimator


def _insufficient(fitting: int, floor: int, batch_size: int) -> str:
    return (
        f"Insufficient memory for the required KV cache: only {fitting} blocks can be allocated, but at least "
        f"{floor} blocks are required. Consider reducing `max_seq_len` or `batch_size` (currently {batch_size}) "
        "to lower the memory requirement."
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

    budget: int | None = None
    budget_error: EstimateError | None = None
    try:
        check_request(request)
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
        parsed: ParsedBudget | None = None
        try:
            parsed = parse_budget(request.memory_budget)
        except EstimateError as error:
            budget_error = error
        warnings.extend(budget_hints(request.memory_budget))
        try:
            pool = _reduced(report, request)
        except EstimateError:
            if budget_error is not None:  # the budget is checked first; its error wins
                raise budget_error from None
            raise
        # The DRAM is split over the report's chiplets, as the reference splits it (an empty report
        # says nothing about chiplets: the family's count stands; 0.12.0 would take 1).
        target = npu.split_over(pool.num_chiplets or npu.num_chiplets)
        if target.available_per_chiplet <= 0:  # 0.12.0 would go on with negative DRAM
            raise _bad_report(
                f"The report covers {target.num_chiplets} chiplets per device; {npu.name}'s DRAM split over them "
                f"leaves {target.available_per_chiplet} bytes per chiplet after the {npu.reserved_per_chiplet}-byte "
                f"reserve, so the report cannot come from this NPU ({npu.num_chiplets} chiplet(s)). Check the report's "
                "chiplet indices and the npu."
            )
        warnings.extend(_shape_warnings(pool, request, npu, target))
        if parsed is not None:
            try:
                budget = parsed.bytes_on(target)
            except EstimateError as error:
                budget_error = error
    except EstimateError as error:
        return failed(error)

    full, floor = attention.num_full_blocks, attention.num_min_blocks
    explicit = request.kvcache_num_blocks
    eager = attention.attn_impl == "eager"
    fitting = None if budget is None else largest_fitting(pool, budget // target.num_chiplets, full)
    chosen: int | None = explicit if explicit else (full if eager else None)
    breakdown = explain(pool, target, budget, attention, fitting, chosen, request.num_devices)
    if budget_error is not None:
        return failed(budget_error)
    assert budget is not None and fitting is not None

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
            # 0.12.0 accepts this silently; the count is kept as it does, and the warning says why it may
            # fail at run time (docs/estimator.md, "Decisions").
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
