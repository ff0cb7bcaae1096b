"""The estimator's input and output: ``Request`` (optimum-rbln's ``rbln_*`` options and a budget),
``Resolution`` (a block count or the error, and the explanation), and the request's validation:
every count a well-formed integer within its bound (``_limits.LIMITS``), before anything is computed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import EstimateError
from ._attention import AttentionConfig
from ._breakdown import Breakdown
from ._limits import LIMITS

__all__ = ["Request", "Resolution", "check_request"]


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
    ) -> Request:
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

    def raise_for_error(self) -> Resolution:
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


def _check_bound(name: str, value: object, limit_key: str | None = None) -> None:
    """An integer already known to be well-formed, against its upper bound (``_limits.LIMITS``): no
    request makes the estimator compute or allocate in proportion to a number it typed."""
    limit = LIMITS[limit_key or name]
    if isinstance(value, int) and value > limit:
        raise _invalid(f"`{name}` is {value}, over the limit of {limit:,} (docs/security.md lists the limits).")


def check_request(request: object) -> Request:
    """``request`` itself when it is a well-formed Request within the bounds; else the error naming the field."""
    if not isinstance(request, Request):
        raise _invalid(f"estimate() expects a Request, got {type(request).__name__}.")
    _check_int("max_seq_len", request.max_seq_len, 1)
    _check_int("batch_size", request.batch_size, 1)
    _check_int("num_devices", request.num_devices, 1)
    _check_int("current_blocks", request.current_blocks, 1)
    _check_int("kvcache_partition_len", request.kvcache_partition_len, 1, optional=True)
    _check_int("kvcache_block_size", request.kvcache_block_size, 1, optional=True)
    for name in ("max_seq_len", "batch_size", "num_devices", "kvcache_partition_len", "kvcache_block_size"):
        _check_bound(name, getattr(request, name))
    _check_bound("current_blocks", request.current_blocks, "kvcache_num_blocks")
    _check_bound("prefill_chunk_size", request.prefill_chunk_size)
    _check_bound("kvcache_num_blocks", request.kvcache_num_blocks)
    chunk = request.prefill_chunk_size
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int)):
        # range and divisibility are checked with the reference's wording by resolve_attention
        raise _invalid(f"`prefill_chunk_size` must be an integer divisible by 64 or null (auto), got {chunk!r}.")
    if (
        isinstance(request.kvcache_num_blocks, bool)
        or not isinstance(request.kvcache_num_blocks, int)
        or request.kvcache_num_blocks < 0
    ):
        raise _invalid(
            f"`kvcache_num_blocks` must be 0 (estimate automatically) or a positive integer, "
            f"got {request.kvcache_num_blocks!r}."
        )
    if request.attn_impl is not None and not isinstance(request.attn_impl, str):
        raise _invalid(f"`attn_impl` must be 'eager', 'flash_attn' or null, got {request.attn_impl!r}.")
    return request
