"""Attention defaults and validation per NPU family (optimum-rbln 0.12.0 semantics)."""

import pytest

from rbln_build.errors import EstimateError
from rbln_build.estimator._attention import resolve_attention
from rbln_build.estimator._npu import resolve_npu

CR = resolve_npu("RBLN-CR03")
CA = resolve_npu("RBLN-CA25")


@pytest.mark.parametrize(
    "npu, kwargs, expected",
    [
        pytest.param(
            CR,
            dict(batch_size=8, max_seq_len=40960, kvcache_partition_len=8192),
            ("flash_attn", 8192, 8192, 512, 40, 9),
            id="spec-batch8-cr",
        ),
        pytest.param(
            CA,
            dict(batch_size=8, max_seq_len=40960, kvcache_partition_len=8192),
            ("flash_attn", 8192, 8192, 128, 40, 9),
            id="spec-batch8-ca",
        ),
        pytest.param(
            CR,
            dict(batch_size=1, max_seq_len=40960, kvcache_partition_len=8192),
            ("flash_attn", 8192, 8192, 512, 5, 5),
            id="spec-batch1-full-equals-floor",
        ),
        pytest.param(CR, dict(batch_size=4, max_seq_len=4096), ("eager", None, 4096, 512, 4, 4), id="eager-default-cr"),
        # flash with no partition: REBEL default partition 8192, ATOM 16384
        pytest.param(
            CR,
            dict(batch_size=2, max_seq_len=32768, attn_impl="flash_attn"),
            ("flash_attn", 8192, 8192, 512, 8, 5),
            id="flash-default-partition-rebel",
        ),
        pytest.param(
            CA,
            dict(batch_size=2, max_seq_len=32768, attn_impl="flash_attn"),
            ("flash_attn", 16384, 16384, 128, 4, 3),
            id="flash-default-partition-atom",
        ),
        # batch larger than blocks per sequence: floor = batch + 1
        pytest.param(
            CR,
            dict(batch_size=16, max_seq_len=4096, kvcache_partition_len=1024),
            ("flash_attn", 1024, 1024, 512, 64, 17),
            id="floor-from-batch",
        ),
        pytest.param(
            CA,
            dict(batch_size=1, max_seq_len=2048, kvcache_partition_len=1024, prefill_chunk_size=256),
            ("flash_attn", 1024, 1024, 256, 2, 2),
            id="floor-capped-by-full-pool",
        ),
    ],
)
def test_defaults_and_block_counts(npu, kwargs, expected):
    att = resolve_attention(npu, **kwargs)
    got = (
        att.attn_impl,
        att.kvcache_partition_len,
        att.kvcache_block_size,
        att.prefill_chunk_size,
        att.num_full_blocks,
        att.num_min_blocks,
    )
    assert got == expected


def test_partition_len_switches_eager_to_flash_with_a_warning():
    att = resolve_attention(CR, batch_size=1, max_seq_len=16384, attn_impl="eager", kvcache_partition_len=4096)
    assert att.attn_impl == "flash_attn"
    assert len(att.warnings) == 1 and "flash_attn" in att.warnings[0]


@pytest.mark.parametrize(
    "npu, kwargs, message",
    [
        pytest.param(
            CR,
            dict(max_seq_len=32768),
            "`max_seq_len` is set to 32768, which exceeds the REBEL limit of 16384 for 'eager' attention.",
            id="eager-too-long-rebel",
        ),
        pytest.param(
            CR,
            dict(max_seq_len=40000, kvcache_partition_len=8192),
            "`max_seq_len` (40000) must be a multiple of `kvcache_partition_len` (8192)",
            id="not-a-multiple",
        ),
        pytest.param(
            CR,
            dict(max_seq_len=8192, kvcache_partition_len=8192),
            "`max_seq_len` (8192) must be a multiple of `kvcache_partition_len` (8192)",
            id="one-partition-only",
        ),
        pytest.param(
            CR,
            dict(max_seq_len=65536, kvcache_partition_len=32768),
            "`kvcache_partition_len` (32768) is out of the REBEL supported range for 'flash_attn' "
            "(1024 <= `kvcache_partition_len` <= 16384)",
            id="partition-above-rebel-max",
        ),
        pytest.param(
            CA,
            dict(max_seq_len=1024, kvcache_partition_len=512),
            "`kvcache_partition_len` (512) is out of the ATOM supported range",
            id="partition-below-min",
        ),
        pytest.param(
            CR,
            dict(max_seq_len=4096, kvcache_partition_len=1024, kvcache_block_size=2048),
            "the `kvcache_block_size` (2048) must always be set equal to the `kvcache_partition_len` 1024.",
            id="flash-block-size-mismatch",
        ),
        pytest.param(
            CR,
            dict(max_seq_len=4096, kvcache_block_size=1024),
            "the `kvcache_block_size` (1024) must always be set equal to the `max_seq_len` 4096.",
            id="eager-block-size-mismatch",
        ),
        pytest.param(CR, dict(max_seq_len=4096, attn_impl="sdpa"), "Unknown `attn_impl` : sdpa.", id="unknown-impl"),
        pytest.param(
            CR,
            dict(max_seq_len=4096, prefill_chunk_size=100),
            "`prefill_chunk_size` must be a positive integer divisible by 64.",
            id="chunk-not-64",
        ),
    ],
)
def test_invalid_attention_is_rejected_with_its_message(npu, kwargs, message):
    with pytest.raises(EstimateError) as info:
        resolve_attention(npu, batch_size=1, **kwargs)
    assert message in str(info.value)
    assert info.value.kind == "invalid_attention"


@pytest.mark.parametrize("field", ["batch_size", "max_seq_len"])
@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "8"])
def test_sizes_must_be_positive_integers(field, bad):
    kwargs = dict(batch_size=1, max_seq_len=4096)
    kwargs[field] = bad
    with pytest.raises(EstimateError) as info:
        resolve_attention(CR, **kwargs)
    assert f"`{field}` must be a positive integer, got {bad!r}." == str(info.value)
