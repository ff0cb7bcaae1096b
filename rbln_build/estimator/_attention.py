"""Attention configuration: defaults and validation per NPU family, as optimum-rbln 0.12.0 does.

``resolve_attention`` fills ``attn_impl``, ``kvcache_partition_len``, ``kvcache_block_size`` and
``prefill_chunk_size`` the way optimum-rbln resolves them for the target NPU, then validates them
with the same rules and wording. Pure arithmetic: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import EstimateError
from ._npu import NpuTarget

__all__ = ["AttentionConfig", "resolve_attention", "attention_options", "ATTENTION_OPTIONS"]


@dataclass(frozen=True)
class AttentionConfig:
    attn_impl: str  # "eager" or "flash_attn"
    kvcache_partition_len: int | None
    kvcache_block_size: int
    prefill_chunk_size: int
    max_seq_len: int
    batch_size: int
    warnings: tuple[str, ...] = ()

    @property
    def blocks_per_sequence(self) -> int:
        return self.max_seq_len // self.kvcache_block_size

    @property
    def num_full_blocks(self) -> int:
        return self.blocks_per_sequence * self.batch_size

    @property
    def num_min_blocks(self) -> int:
        if self.attn_impl == "flash_attn":
            return min(max(self.blocks_per_sequence, self.batch_size) + 1, self.num_full_blocks)
        return self.batch_size

    def to_json(self) -> dict[str, object]:
        return {
            "attn_impl": self.attn_impl,
            "kvcache_partition_len": self.kvcache_partition_len,
            "kvcache_block_size": self.kvcache_block_size,
            "prefill_chunk_size": self.prefill_chunk_size,
            "max_seq_len": self.max_seq_len,
            "batch_size": self.batch_size,
        }


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise EstimateError(f"`{name}` must be a positive integer, got {value!r}.", kind="invalid_request")
    return value


def _optional_positive_int(name: str, value: object) -> int | None:
    return None if value is None else _positive_int(name, value)


ATTENTION_OPTIONS = (
    "batch_size",
    "max_seq_len",
    "attn_impl",
    "kvcache_partition_len",
    "kvcache_block_size",
    "prefill_chunk_size",
)


def attention_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Build options (a recipe's, a config's, a request's) as ``resolve_attention`` keywords: the one
    place that says what an absent option means (batch_size 1; max_seq_len None, which is rejected
    with its name; the others: the NPU's default)."""
    out = {key: options.get(key) for key in ATTENTION_OPTIONS}
    if out["batch_size"] is None:
        out["batch_size"] = 1
    return out


def resolve_attention(
    npu: NpuTarget,
    *,
    batch_size: int,
    max_seq_len: int,
    attn_impl: str | None = None,
    kvcache_partition_len: int | None = None,
    kvcache_block_size: int | None = None,
    prefill_chunk_size: int | None = None,
) -> AttentionConfig:
    """Fill defaults for ``npu`` and validate; raises ``EstimateError(kind="invalid_attention")``."""
    batch_size = _positive_int("batch_size", batch_size)
    max_seq_len = _positive_int("max_seq_len", max_seq_len)
    kvcache_partition_len = _optional_positive_int("kvcache_partition_len", kvcache_partition_len)
    kvcache_block_size = _optional_positive_int("kvcache_block_size", kvcache_block_size)
    warnings: list[str] = []

    if attn_impl is None:
        attn_impl = "eager"
    if prefill_chunk_size is None:
        prefill_chunk_size = npu.default_prefill_chunk_size
    if (
        isinstance(prefill_chunk_size, bool)
        or not isinstance(prefill_chunk_size, int)
        or (prefill_chunk_size <= 0 or prefill_chunk_size % 64 != 0)
    ):
        raise EstimateError("`prefill_chunk_size` must be a positive integer divisible by 64.", "invalid_attention")

    if kvcache_partition_len is not None and attn_impl == "eager":
        attn_impl = "flash_attn"
        warnings.append(
            "`kvcache_partition_len` is set, and KV-cache partitioning needs flash attention, so `attn_impl` "
            "was switched from 'eager' to 'flash_attn'."
        )
    if kvcache_partition_len is None and attn_impl == "flash_attn":
        kvcache_partition_len = npu.limits.default_flash_partition_len
    if kvcache_block_size is None:
        kvcache_block_size = max_seq_len if attn_impl == "eager" else kvcache_partition_len

    if attn_impl not in ("eager", "flash_attn"):
        raise EstimateError(
            f"Unknown `attn_impl` : {attn_impl}. (Available : 'eager', 'flash_attn`)", "invalid_attention"
        )
    limits = npu.limits
    if attn_impl == "eager" and max_seq_len > limits.max_eager_seq_len:
        raise EstimateError(
            f"`max_seq_len` is set to {max_seq_len}, which exceeds the {limits.name} limit of "
            f"{limits.max_eager_seq_len} for 'eager' attention. Please reduce the `max_seq_len` to "
            f"{limits.max_eager_seq_len} or lower, or consider switching `attn_impl` to 'flash_attn' for larger "
            "sequence lengths.",
            "invalid_attention",
        )
    if attn_impl == "flash_attn":
        assert kvcache_partition_len is not None
        if max_seq_len // kvcache_partition_len < 2 or max_seq_len % kvcache_partition_len != 0:
            raise EstimateError(
                f"`max_seq_len` ({max_seq_len}) must be a multiple of `kvcache_partition_len` "
                f"({kvcache_partition_len}) when using 'flash_attn'. Please adjust either value to meet this "
                "requirement.",
                "invalid_attention",
            )
        if not limits.min_flash_partition_len <= kvcache_partition_len <= limits.max_flash_partition_len:
            raise EstimateError(
                f"`kvcache_partition_len` ({kvcache_partition_len}) is out of the {limits.name} supported range "
                f"for 'flash_attn' ({limits.min_flash_partition_len} <= `kvcache_partition_len` <= "
                f"{limits.max_flash_partition_len}). Please provide a valid value within this range.",
                "invalid_attention",
            )
        if max_seq_len < limits.min_flash_max_seq_len:
            raise EstimateError(
                f"`max_seq_len` ({max_seq_len}) is too small for 'flash_attn'. The minimum supported value is "
                f"{limits.min_flash_max_seq_len}. Please increase `max_seq_len` to meet this requirement, or "
                "consider switching `attn_impl` to 'eager' for shorter lengths.",
                "invalid_attention",
            )
        if kvcache_partition_len != kvcache_block_size:
            raise EstimateError(
                f"When using 'flash attention', the `kvcache_block_size` ({kvcache_block_size}) must always be "
                f"set equal to the `kvcache_partition_len` {kvcache_partition_len}.",
                "invalid_attention",
            )
    elif kvcache_block_size != max_seq_len:
        raise EstimateError(
            f"When using 'eager attention', the `kvcache_block_size` ({kvcache_block_size}) must always be set "
            f"equal to the `max_seq_len` {max_seq_len}.",
            "invalid_attention",
        )
    return AttentionConfig(
        attn_impl=attn_impl,
        kvcache_partition_len=kvcache_partition_len,
        kvcache_block_size=kvcache_block_size,
        prefill_chunk_size=prefill_chunk_size,
        max_seq_len=max_seq_len,
        batch_size=batch_size,
        warnings=tuple(warnings),
    )
