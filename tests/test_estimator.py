"""The estimator against hand-computed numbers: one named case per rule of the specification.

Unless a case says otherwise the model is "two KV tensors of 3 MiB per block, 10 GiB of non-KV
bytes" on ATOM-Max (RBLN-CA25, 1 chiplet, 16,877,879,296 bytes available). At N blocks each tensor
takes align_2MiB(3 MiB * N), so the KV bytes are 2 * (3N rounded up to even) MiB:
N=3 -> 20 MiB, 4 -> 24, 8 -> 48, 9 -> 56, 36 -> 216, 37 -> 224, 40 -> 240.
"""

import json

import pytest

from rbln_build.errors import EstimateError
from rbln_build.estimator import (
    Request,
    align_2mib,
    estimate,
    fits,
    kv_bytes_at,
    max_blocks_within,
    min_budget_for_blocks,
)
from rbln_build.estimator._report import AllocationReport, KVTensor

MiB, GiB = 2**20, 2**30
CA_AVAILABLE = 16_877_879_296
CR_AVAILABLE = 150_323_855_360


def make_report(non_kv, kv_per_block=(), fixed=(), current_blocks=1, extra_alloc=None):
    """non_kv: [[bytes per chiplet] per node]; kv_per_block: grids of resizable tensors at 1 block
    (scaled to ``current_blocks``); fixed: grids of non-resizable tensors."""
    alloc = {"prefill": {"weights": tuple(tuple(r) for r in non_kv)}}
    if extra_alloc:
        alloc.update(extra_alloc)
    kv = {}
    for i, grid in enumerate(kv_per_block):
        kv[f"kv{i}"] = KVTensor(True, tuple(tuple(s * current_blocks for s in row) for row in grid))
    for i, grid in enumerate(fixed):
        kv[f"swa{i}"] = KVTensor(False, tuple(tuple(row) for row in grid))
    return AllocationReport(alloc=alloc, kv_tensors=kv, current_blocks=current_blocks)


BASE = make_report([[10 * GiB]], [[[3 * MiB]], [[3 * MiB]]])
FLASH_8 = dict(npu="RBLN-CA25", max_seq_len=40_960, batch_size=8, kvcache_partition_len=8_192, attn_impl="flash_attn")
FLASH_1 = dict(FLASH_8, batch_size=1)


def insufficient(fitting, floor, batch):
    return (
        f"Insufficient memory for the required KV cache: only {fitting} blocks can be allocated, but at least "
        f"{floor} blocks are required. Consider reducing `max_seq_len` or `batch_size` (currently {batch}) to "
        "lower the memory requirement."
    )


# -- the specification's own figures ---------------------------------------------------------------


@pytest.mark.parametrize(
    "npu, batch, full, floor",
    [
        pytest.param("RBLN-CA25", 8, 40, 9, id="spec-batch8-atom"),
        pytest.param("RBLN-CR03", 8, 40, 9, id="spec-batch8-rebel"),
        pytest.param("RBLN-CA25", 1, 5, 5, id="spec-batch1-full-equals-floor"),
        pytest.param("RBLN-CA25", 16, 80, 17, id="batch16-floor-follows-batch"),
        pytest.param("RBLN-CA25", 3, 15, 6, id="batch3-floor-follows-seq"),
    ],
)
def test_full_pool_and_floor(npu, batch, full, floor):
    chiplets = 4 if npu.startswith("RBLN-CR") else 1
    report = make_report([[GiB] * chiplets], [[[MiB] * chiplets]])
    res = estimate(Request(npu=npu, max_seq_len=40_960, batch_size=batch, kvcache_partition_len=8_192), report)
    assert (res.num_full_blocks, res.num_min_blocks) == (full, floor)
    assert res.kvcache_num_blocks == full  # plenty of room: the full pool


@pytest.mark.parametrize(
    "request_kw, report, blocks, headroom",
    [
        # budget int(16877879296 * 0.65) = 10970621542; room 233203302; 36 -> 216 MiB, 37 -> 224 MiB
        pytest.param(dict(FLASH_8, memory_budget=0.65), BASE, 36, 233_203_302 - 216 * MiB, id="fraction-0.65"),
        pytest.param(dict(FLASH_8, memory_budget="65%"), BASE, 36, 233_203_302 - 216 * MiB, id="percent-65"),
        pytest.param(dict(FLASH_8), BASE, 40, CA_AVAILABLE - 10 * GiB - 240 * MiB, id="no-budget-full-pool"),
        # exactly the full pool's bytes: 10 GiB + 240 MiB
        pytest.param(dict(FLASH_8, memory_budget=10 * GiB + 240 * MiB), BASE, 40, 0, id="full-pool-exact-budget"),
        # one byte less: 39 blocks take 2 * align(117 MiB) = 236 MiB, leaving 4 MiB - 1
        pytest.param(
            dict(FLASH_8, memory_budget=10 * GiB + 240 * MiB - 1), BASE, 39, 4 * MiB - 1, id="full-pool-minus-one-byte"
        ),
        # the floor exactly: 10 GiB + 56 MiB
        pytest.param(dict(FLASH_8, memory_budget="10296MB"), BASE, 9, 0, id="floor-exact-budget"),
    ],
)
def test_search(request_kw, report, blocks, headroom):
    res = estimate(Request(**request_kw), report)
    assert res.ok, res.error
    assert res.kvcache_num_blocks == blocks
    assert res.breakdown.headroom_bytes == headroom
    assert res.breakdown.headroom_blocks == blocks


@pytest.mark.parametrize(
    "request_kw, message",
    [
        # 10 GiB + 48 MiB: 8 blocks (48 MiB) fit, 9 (56 MiB) do not -- the spec's first example
        pytest.param(dict(FLASH_8, memory_budget="10288MB"), insufficient(8, 9, 8), id="spec-only-8-of-9"),
        # 10 GiB + 20 MiB: 3 blocks (20 MiB) fit, 4 (24 MiB) do not -- the spec's second example
        pytest.param(dict(FLASH_8, memory_budget="10260MB"), insufficient(3, 9, 8), id="spec-only-3-of-9"),
        # batch 1: full == floor == 5; 4 blocks (24 MiB) fit, 5 (32 MiB) do not
        pytest.param(dict(FLASH_1, memory_budget="10264MB"), insufficient(4, 5, 1), id="batch1-no-slack"),
        # exactly the non-KV bytes: not one block fits -> 0 (0.12 would say "only 1 blocks")
        pytest.param(dict(FLASH_8, memory_budget="10GB"), insufficient(0, 9, 8), id="true-zero-not-one"),
        pytest.param(dict(FLASH_8, memory_budget=1), insufficient(0, 9, 8), id="one-byte"),
        pytest.param(dict(FLASH_8, memory_budget=1e-12), insufficient(0, 9, 8), id="fraction-rounds-to-0-bytes"),
    ],
)
def test_below_the_floor_is_the_specification_error_word_for_word(request_kw, message):
    res = estimate(Request(**request_kw), BASE)
    assert not res.ok and res.kvcache_num_blocks is None
    assert res.error == message and res.error_kind == "insufficient_memory"
    assert "\n" not in res.error
    with pytest.raises(EstimateError) as info:
        res.raise_for_error()
    assert str(info.value) == message and info.value.kind == "insufficient_memory"
    assert res.breakdown is not None  # failures carry their breakdown too


def test_one_byte_budget_warns_that_1_is_a_byte():
    res = estimate(Request(**FLASH_8, memory_budget=1), BASE)
    assert any("`1` is one byte" in w and "`1.0` is 100%" in w for w in res.warnings)
    assert estimate(Request(**FLASH_8, memory_budget=1.0), BASE).kvcache_num_blocks == 40


# -- chiplets, nodes, fixed tensors, DramTensor --------------------------------------------------------

# RBLN-CR: max_seq_len 131072 / 8192 = 16 blocks per sequence; batch 128 -> full 2048, floor 129
CR_BIG = dict(npu="RBLN-CR03", max_seq_len=131_072, batch_size=128, kvcache_partition_len=8_192)
CR_REPORT = make_report([[GiB, GiB, GiB, 2 * GiB]], [[[MiB, MiB, MiB, MiB]]])


@pytest.mark.parametrize(
    "budget, per_chiplet, blocks",
    [
        # 12 GiB / 4 = 3 GiB per chiplet; tightest chiplet has 2 GiB non-KV -> 1024 MiB -> 1024 blocks
        pytest.param("12GB", 3 * GiB, 1024, id="tightest-chiplet-decides"),
        pytest.param(12 * GiB + 3, 3 * GiB, 1024, id="per-chiplet-floor-division-up"),
        # 12 GiB - 1 -> 3 GiB - 1 per chiplet (floor); align(1023 MiB) = 1024 MiB no longer fits -> 1022
        pytest.param(12 * GiB - 1, 3 * GiB - 1, 1022, id="per-chiplet-floor-division-down"),
        pytest.param(None, 35 * GiB, 2048, id="no-budget-full-pool"),
    ],
)
def test_chiplets(budget, per_chiplet, blocks):
    res = estimate(Request(**CR_BIG, memory_budget=budget), CR_REPORT)
    assert res.kvcache_num_blocks == blocks
    assert res.breakdown.tightest_chiplet == (0, 3)
    assert res.breakdown.budget_per_chiplet == per_chiplet


def test_nodes_each_get_the_budget_and_the_tightest_node_decides():
    # 2 devices; ATOM 65536 / 16384 = 4 per sequence, batch 256 -> full 1024, floor 257.
    # Node 1: 16096 MiB - 11 GiB = 4832 MiB -> 2 * align(3N MiB) <= 4832 MiB -> N <= 805.
    # Node 0 alone (10 GiB) would allow 2 * align(3N) <= 5856 MiB -> N <= 976.
    req = dict(npu="RBLN-CA25", max_seq_len=65_536, batch_size=256, kvcache_partition_len=16_384)
    two = make_report([[10 * GiB], [11 * GiB]], [[[3 * MiB], [3 * MiB]]] * 2)
    one = make_report([[10 * GiB]], [[[3 * MiB]]] * 2)
    res = estimate(Request(**req, num_devices=2), two)
    assert res.kvcache_num_blocks == 805
    assert res.breakdown.tightest_chiplet == (1, 0)
    assert res.breakdown.non_kv_bytes == ((10 * GiB,), (11 * GiB,))
    assert res.breakdown.budget_bytes == CA_AVAILABLE  # per device, not per group
    assert estimate(Request(**req), one).kvcache_num_blocks == 976


def test_non_resizable_tensor_is_fixed_and_aligned_once():
    # a 5 MiB + 1 byte sliding-window cache takes 6 MiB at any count
    report = make_report([[10 * GiB]], [[[3 * MiB]]] * 2, fixed=[[[5 * MiB + 1]]])
    assert kv_bytes_at(report, 1) == {(0, 0): 6 * MiB + 2 * 4 * MiB}  # 6 + 2 * align(3 MiB)
    assert kv_bytes_at(report, 36) == {(0, 0): 6 * MiB + 216 * MiB}
    # 0.65 leaves 233203302 bytes: 6 MiB fixed + 216 MiB at 36 = 222 MiB fits; 34 -> 6 + 2*102 = 210 MiB
    res = estimate(Request(**FLASH_8, memory_budget=0.65), report)
    assert res.kvcache_num_blocks == 36  # 6 + 224 (37) = 230 MiB = 241172480 > 233203302
    assert res.breakdown.kv_fixed_bytes == ((6 * MiB,),)
    assert res.breakdown.kv_bytes_per_block == ((6 * MiB,),)


def test_fixed_tensor_counts_at_every_count_even_with_only_fixed_kv():
    report = make_report([[10 * GiB]], fixed=[[[100 * MiB]]])
    ok = estimate(Request(**FLASH_8, memory_budget=10 * GiB + 100 * MiB), report)
    assert ok.kvcache_num_blocks == 40
    short = estimate(Request(**FLASH_8, memory_budget=10 * GiB + 100 * MiB - 1), report)
    assert short.error == insufficient(0, 9, 8)


def test_dram_tensor_key_is_not_charged():
    with_dram = make_report(
        [[10 * GiB]], [[[3 * MiB]]] * 2, extra_alloc={"decode": {"DramTensor": ((999 * GiB,),), "ws": ((0,),)}}
    )
    a = estimate(Request(**FLASH_8, memory_budget=0.65), with_dram)
    b = estimate(Request(**FLASH_8, memory_budget=0.65), BASE)
    assert a.kvcache_num_blocks == b.kvcache_num_blocks == 36


def test_every_graph_and_key_is_charged():
    split = make_report([[9 * GiB]], [[[3 * MiB]]] * 2, extra_alloc={"decode": {"workspace": ((GiB,),)}})
    assert estimate(Request(**FLASH_8, memory_budget=0.65), split).kvcache_num_blocks == 36


# -- re-estimation of an artifact that already holds N blocks --------------------------------------------


@pytest.mark.parametrize("current", [1, 2, 36, 40, 1000])
def test_reestimation_from_a_resized_artifact_gives_the_same_count(current):
    report = make_report([[10 * GiB]], [[[3 * MiB]]] * 2, current_blocks=current)
    res = estimate(Request(**FLASH_8, memory_budget=0.65, current_blocks=current), report)
    assert res.kvcache_num_blocks == 36


def test_reestimation_truncates_per_block_bytes_like_the_reference():
    # 36 blocks reported as 108 MiB + 35 bytes: 108 MiB // 36 ... (108 MiB + 35) // 36 == 3 MiB
    report = AllocationReport(
        alloc={"prefill": {"weights": ((10 * GiB,),)}},
        kv_tensors={f"kv{i}": KVTensor(True, ((108 * MiB + 35,),)) for i in range(2)},
        current_blocks=36,
    )
    assert kv_bytes_at(report, 37) == {(0, 0): 224 * MiB}
    res = estimate(Request(**FLASH_8, memory_budget=0.65, current_blocks=36), report)
    assert res.kvcache_num_blocks == 36


def test_current_blocks_must_agree_between_request_and_report():
    report = make_report([[10 * GiB]], [[[3 * MiB]]], current_blocks=36)
    res = estimate(Request(**FLASH_8), report)
    assert res.error_kind == "invalid_report"
    assert "current_blocks=36" in res.error and "current_blocks=1" in res.error


# -- eager attention ------------------------------------------------------------------------------------

EAGER = dict(npu="RBLN-CA25", max_seq_len=4_096, batch_size=4)  # block = 4096 -> full 4, floor 4


@pytest.mark.parametrize("budget", [None, 1.0, "1GB", 1, "50%"])
def test_eager_unset_count_is_the_full_pool_whatever_the_budget(budget):
    res = estimate(Request(**EAGER, memory_budget=budget), BASE)
    assert res.ok and res.kvcache_num_blocks == 4
    assert (res.num_full_blocks, res.num_min_blocks) == (4, 4)
    assert res.attention.attn_impl == "eager" and res.attention.kvcache_block_size == 4_096
    if budget is not None:
        assert any("does not change the count" in w for w in res.warnings)


def test_eager_full_pool_that_does_not_fit_the_budget_warns():
    res = estimate(Request(**EAGER, memory_budget="1GB"), BASE)
    assert res.kvcache_num_blocks == 4
    assert any("4 blocks do not fit" in w and "short by" in w for w in res.warnings)


@pytest.mark.parametrize(
    "budget, kind",
    [
        pytest.param("lots", "invalid_budget", id="malformed"),
        pytest.param(True, "invalid_budget", id="bool"),
        pytest.param(2.0, "invalid_budget", id="fraction-over-one"),
        pytest.param("100GB", "budget_exceeds_dram", id="over-dram"),
    ],
)
def test_eager_still_rejects_a_bad_budget(budget, kind):
    res = estimate(Request(**EAGER, memory_budget=budget), BASE)
    assert res.error_kind == kind and res.kvcache_num_blocks is None
    assert res.num_full_blocks == 4  # the arithmetic that was resolved is still reported


# -- explicit kvcache_num_blocks ----------------------------------------------------------------------


EXCLUSIVE = (
    "`memory_budget` and an explicit `kvcache_num_blocks` are mutually exclusive. `memory_budget` only guides "
    "automatic block estimation, which runs when `kvcache_num_blocks` is unset."
)


@pytest.mark.parametrize(
    "request_kw",
    [
        pytest.param(dict(FLASH_8, kvcache_num_blocks=20, memory_budget=0.5), id="flash-fraction"),
        pytest.param(dict(EAGER, kvcache_num_blocks=4, memory_budget="10GB"), id="eager-bytes"),
        pytest.param(dict(FLASH_8, kvcache_num_blocks=20, memory_budget="garbage"), id="malformed-budget-too"),
        pytest.param(dict(FLASH_8, kvcache_num_blocks=20, memory_budget=1.0), id="budget-100%"),
    ],
)
def test_budget_and_explicit_count_are_mutually_exclusive_word_for_word(request_kw):
    res = estimate(Request(**request_kw), BASE)
    assert res.error == EXCLUSIVE and res.error_kind == "budget_and_blocks_exclusive"


@pytest.mark.parametrize(
    "request_kw, blocks, warning",
    [
        pytest.param(dict(FLASH_8, kvcache_num_blocks=20), 20, None, id="flash-within"),
        pytest.param(dict(FLASH_8, kvcache_num_blocks=9), 9, None, id="flash-at-floor"),
        pytest.param(
            dict(FLASH_8, kvcache_num_blocks=41),
            41,
            "The set `kvcache_num_blocks` (41) is greater than the required number of blocks (40).",
            id="flash-above-full-warns",
        ),
        pytest.param(
            dict(EAGER, kvcache_num_blocks=2),
            2,
            "is less than `batch_size` (4) under eager attention",
            id="eager-below-batch-warns",
        ),
        pytest.param(
            dict(EAGER, kvcache_num_blocks=5),
            5,
            "The set `kvcache_num_blocks` (5) is greater than the required number of blocks (4).",
            id="eager-above-full-warns",
        ),
    ],
)
def test_explicit_count_is_kept(request_kw, blocks, warning):
    res = estimate(Request(**request_kw), BASE)
    assert res.ok and res.kvcache_num_blocks == blocks
    assert res.breakdown.headroom_blocks == blocks
    if warning is None:
        assert res.warnings == (res.attention.warnings)
    else:
        assert any(warning in w for w in res.warnings)


def test_explicit_count_below_the_floor_under_flash_is_an_error():
    res = estimate(Request(**FLASH_8, kvcache_num_blocks=8), BASE)
    assert res.error_kind == "blocks_below_floor"
    assert res.error.startswith("The set `kvcache_num_blocks` (8) is less than the minimum number of blocks (9).")


def test_explicit_count_that_exceeds_the_device_warns():
    # 10 GiB non-KV leaves 5856 MiB: 977 blocks need 2 * 2932 MiB = 5864 MiB
    res = estimate(Request(**FLASH_8, kvcache_num_blocks=977), BASE)
    assert res.kvcache_num_blocks == 977
    assert res.breakdown.headroom_bytes == 5856 * MiB - 5864 * MiB
    assert any("977 blocks do not fit" in w and f"short by {8 * MiB} bytes" in w for w in res.warnings)


# -- the two budgets a release engineer needs --------------------------------------------------------------


def test_budget_answers_are_exact_on_atom():
    res = estimate(Request(**FLASH_8, memory_budget=0.65), BASE)
    floor, full = res.breakdown.budget_for_floor, res.breakdown.budget_for_full_pool
    assert (floor.blocks, floor.bytes, floor.reason) == (9, 10 * GiB + 56 * MiB, None)
    assert (full.blocks, full.bytes, full.reason) == (40, 10 * GiB + 240 * MiB, None)
    for answer, blocks in ((floor, 9), (full, 40)):
        assert estimate(Request(**FLASH_8, memory_budget=answer.bytes), BASE).kvcache_num_blocks >= blocks
        below = estimate(Request(**FLASH_8, memory_budget=answer.bytes - 1), BASE)
        assert below.kvcache_num_blocks is None or below.kvcache_num_blocks < blocks
        # the fraction resolves to at least those bytes
        assert estimate(Request(**FLASH_8, memory_budget=answer.fraction), BASE).kvcache_num_blocks >= blocks


def test_budget_answers_multiply_the_tightest_chiplet_by_the_chiplet_count():
    res = estimate(Request(**CR_BIG), CR_REPORT)
    # floor 129 blocks: tightest chiplet 2 GiB + align(129 MiB) = 2 GiB + 130 MiB; x 4 chiplets
    assert res.breakdown.budget_for_floor.bytes == 4 * (2 * GiB + 130 * MiB)
    assert res.breakdown.budget_for_full_pool.bytes == 4 * (2 * GiB + 2048 * MiB)
    assert min_budget_for_blocks(CR_REPORT, 129, 4) == 4 * (2 * GiB + 130 * MiB)
    assert fits(CR_REPORT, 129, 4 * (2 * GiB + 130 * MiB), 4)
    assert not fits(CR_REPORT, 129, 4 * (2 * GiB + 130 * MiB) - 1, 4)
    assert max_blocks_within(CR_REPORT, 12 * GiB, 4, 2048) == 1024


def test_no_budget_exists_is_stated_plainly():
    heavy = make_report([[16 * GiB]], [[[3 * MiB]]] * 2)
    res = estimate(Request(**FLASH_8), heavy)
    assert res.error == insufficient(0, 9, 8)
    floor = res.breakdown.budget_for_floor
    assert floor.bytes is None and floor.fraction is None
    assert floor.required_bytes == 16 * GiB + 56 * MiB
    assert floor.reason == (
        "No budget gives the floor (9 blocks) on RBLN-CA25: the tightest chiplet (node 0, chiplet 0) needs "
        f"{16 * GiB + 56 * MiB} bytes, i.e. {16 * GiB + 56 * MiB} bytes per device over 1 chiplet(s), more than "
        "the 16877879296 bytes the device has available."
    )


# -- validation ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_kw, kind, fragment",
    [
        pytest.param(dict(FLASH_8, npu="RBLN-XX"), "unknown_npu", "Known NPU families: RBLN-CA*, RBLN-CR*", id="npu"),
        pytest.param(dict(FLASH_8, npu=3), "unknown_npu", "got 3", id="npu-type"),
        pytest.param(
            dict(FLASH_8, max_seq_len=0),
            "invalid_request",
            "`max_seq_len` must be a positive integer, got 0",
            id="max-seq-len-zero",
        ),
        pytest.param(
            dict(FLASH_8, batch_size="8"),
            "invalid_request",
            "`batch_size` must be a positive integer, got '8'",
            id="batch-str",
        ),
        pytest.param(dict(FLASH_8, batch_size=True), "invalid_request", "got True", id="batch-bool"),
        pytest.param(
            dict(FLASH_8, num_devices=0),
            "invalid_request",
            "`num_devices` must be a positive integer, got 0",
            id="num-devices-zero",
        ),
        pytest.param(
            dict(FLASH_8, kvcache_num_blocks=-1),
            "invalid_request",
            "`kvcache_num_blocks` must be 0 (estimate automatically) or a positive integer, got -1",
            id="blocks-negative",
        ),
        pytest.param(dict(FLASH_8, kvcache_num_blocks=None), "invalid_request", "got None", id="blocks-none"),
        pytest.param(
            dict(FLASH_8, current_blocks=0),
            "invalid_request",
            "`current_blocks` must be a positive integer",
            id="current-zero",
        ),
        pytest.param(
            dict(FLASH_8, kvcache_partition_len=8192.0),
            "invalid_request",
            "`kvcache_partition_len` must be a positive integer or null (auto), got 8192.0",
            id="partition-float",
        ),
        pytest.param(dict(FLASH_8, attn_impl=1), "invalid_request", "`attn_impl` must be", id="attn-type"),
        pytest.param(
            dict(FLASH_8, attn_impl="sdpa"), "invalid_attention", "Unknown `attn_impl` : sdpa", id="attn-unknown"
        ),
        pytest.param(
            dict(FLASH_8, kvcache_partition_len=8000),
            "invalid_attention",
            "must be a multiple of",
            id="partition-not-divisor",
        ),
        pytest.param(
            dict(EAGER, max_seq_len=65_536), "invalid_attention", "exceeds the ATOM limit of 32768", id="eager-too-long"
        ),
        pytest.param(
            dict(FLASH_8, prefill_chunk_size=0),
            "invalid_attention",
            "`prefill_chunk_size` must be a positive integer divisible by 64.",
            id="chunk-zero-reference-words",
        ),
        pytest.param(dict(FLASH_8, prefill_chunk_size=100), "invalid_attention", "divisible by 64", id="chunk-100"),
        pytest.param(dict(FLASH_8, prefill_chunk_size="512"), "invalid_request", "got '512'", id="chunk-str"),
    ],
)
def test_request_validation(request_kw, kind, fragment):
    res = estimate(Request(**request_kw), BASE)
    assert res.error_kind == kind, res.error
    assert fragment in res.error


@pytest.mark.parametrize(
    "request_kw, report, fragment",
    [
        pytest.param(dict(FLASH_8), {"alloc": {}}, "expects an AllocationReport, got dict", id="not-a-report"),
        pytest.param(dict(FLASH_8), make_report([[-1]]), "non-negative integer byte counts, got -1", id="negative"),
    ],
)
def test_report_validation(request_kw, report, fragment):
    res = estimate(Request(**request_kw), report)
    assert res.error_kind == "invalid_report" and fragment in res.error


def test_estimate_does_not_raise_for_a_non_request():
    res = estimate({"npu": "RBLN-CA25"}, BASE)  # type: ignore[arg-type]
    assert res.error_kind == "invalid_request" and "expects a Request, got dict" in res.error


# -- helpers and serialisation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "nbytes, aligned",
    [(0, 0), (1, 2 * MiB), (2 * MiB - 1, 2 * MiB), (2 * MiB, 2 * MiB), (2 * MiB + 1, 4 * MiB)],
)
def test_align_2mib(nbytes, aligned):
    assert align_2mib(nbytes) == aligned


def test_alignment_is_applied_after_scaling_per_tensor():
    # 1 MiB + 1 byte per block: at 2 blocks 2 MiB + 2 -> 4 MiB (not 2 * align(1 MiB + 1) = 4 MiB either way);
    # at 3 blocks 3 MiB + 3 -> 4 MiB, whereas aligning before scaling would give 3 * 2 MiB = 6 MiB.
    report = make_report([[0]], [[[MiB + 1]]])
    assert kv_bytes_at(report, 3) == {(0, 0): 4 * MiB}
    assert kv_bytes_at(report, 1) == {(0, 0): 2 * MiB}


def test_to_json_is_plain_and_deterministic():
    res = estimate(Request(**FLASH_8, memory_budget=0.65), BASE)
    data = res.to_json()
    text = json.dumps(data, sort_keys=True)
    assert json.loads(text) == data
    assert text == json.dumps(estimate(Request(**FLASH_8, memory_budget=0.65), BASE).to_json(), sort_keys=True)
    assert data["kvcache_num_blocks"] == 36 and data["ok"] is True and data["error"] is None
    assert data["breakdown"]["non_kv_bytes"] == [[10 * GiB]]
    failed = estimate(Request(**FLASH_8, memory_budget="10GB"), BASE).to_json()
    assert set(failed) == set(data) and failed["ok"] is False and failed["kvcache_num_blocks"] is None


def test_empty_report_has_zero_grids_of_the_request_shape():
    empty = AllocationReport(alloc={}, kv_tensors={})
    res = estimate(
        Request(npu="RBLN-CR03", num_devices=2, max_seq_len=16_384, attn_impl="flash_attn", memory_budget="50%"), empty
    )
    assert res.kvcache_num_blocks == 2
    assert res.breakdown.non_kv_bytes == ((0, 0, 0, 0), (0, 0, 0, 0))
    assert res.breakdown.headroom_bytes == 75_161_927_680 // 4


def test_a_bad_budget_is_reported_before_a_bad_report():
    # (shapes that differ from the request are not bad: see test_estimator_shapes.py)
    bad = make_report([[-1]])
    res = estimate(Request(**FLASH_8, memory_budget="lots"), bad)
    assert res.error_kind == "invalid_budget" and res.breakdown is None
    res = estimate(Request(**FLASH_8, memory_budget="1GB"), bad)
    assert res.error_kind == "invalid_report"


def test_a_request_from_resolved_attention_resolves_like_the_raw_options() -> None:
    from rbln_build.estimator._attention import resolve_attention
    from rbln_build.estimator._npu import resolve_npu

    raw = dict(npu="RBLN-CR03", max_seq_len=40960, batch_size=8, kvcache_partition_len=8192)
    report = AllocationReport(
        alloc={"prefill": {"weights": [[4 * 2**30] * 4]}},
        kv_tensors={f"kv{c}": KVTensor(True, ((0,) * c + (288 * 2**20,) + (0,) * (3 - c),)) for c in range(4)},
    )
    att = resolve_attention(resolve_npu("RBLN-CR03"), batch_size=8, max_seq_len=40960, kvcache_partition_len=8192)
    from_attention = Request.for_attention("RBLN-CR03", 1, att, memory_budget=0.3)
    assert from_attention.attn_impl == "flash_attn" and from_attention.kvcache_block_size == 8192
    a, b = estimate(from_attention, report), estimate(Request(**raw, memory_budget=0.3), report)
    assert a.kvcache_num_blocks == b.kvcache_num_blocks == 23  # (10752 MiB - 4096 MiB) // 288 MiB
    assert b.warnings and not a.warnings  # only the raw options are told that eager became flash
