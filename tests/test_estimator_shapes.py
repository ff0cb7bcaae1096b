"""Report shapes the way optimum-rbln 0.12.0 takes them, with numbers worked out by hand from its code.

What 0.12.0 does (``_collect_chiplet_kvcache_inputs``, ``get_available_dram_per_chiplet`` and
``_search_num_kvcache_blocks`` in ``optimum/rbln/transformers/modeling_attention_utils.py``):

1. For every graph and every allocation key except ``DramTensor``, it adds each value to the bucket
   ``(node, chiplet)`` of its position, and records that bucket. A graph or key that lists fewer
   nodes or chiplets simply adds nothing to the others (missing = 0).
2. It records the bucket of every KV tensor entry as well.
3. ``num_chiplets = max(chiplet index over the recorded buckets) + 1``.
4. Each chiplet gets ``dram // num_chiplets - reserve``; ``available_total`` is that times
   ``num_chiplets``, the budget resolves against it, and ``per_chiplet = budget // num_chiplets``.
5. N blocks fit when every recorded bucket has ``per_chiplet - non_kv >= kv(N)``; the full pool is
   tried first, then a binary search.

RBLN-CR: 144 GiB DRAM, 1 GiB reserved per chiplet. RBLN-CA: 16 GiB, 288 MiB reserved, 1 chiplet.
Flash attention, max_seq_len 40960, partition 8192, batch 8: full pool 40, floor 9.
"""

from __future__ import annotations

import json

from rbln_build.estimator import AllocationReport, KVTensor, Request, estimate
from rbln_build.inspection._jsonl import handle_line

MiB, GiB = 2**20, 2**30
FLASH_8 = dict(max_seq_len=40_960, batch_size=8, kvcache_partition_len=8_192, attn_impl="flash_attn")


def one_tensor_per_chiplet(per_block: int, chiplets: int = 4) -> dict[str, KVTensor]:
    """Resizable tensors ``kv<c>``, each ``per_block`` bytes on chiplet c and 0 on the others."""
    return {
        f"kv{c}": KVTensor(True, (tuple(per_block if i == c else 0 for i in range(chiplets)),)) for c in range(chiplets)
    }


def test_a_decode_graph_reporting_fewer_chiplets_than_prefill_is_charged_where_it_reports() -> None:
    """0.12.0: buckets (0,0)..(0,3) from prefill; decode's one value adds 1 GiB to (0,0) only.
    num_chiplets = 3 + 1 = 4; available_total = (144 GiB // 4 - 1 GiB) * 4 = 150,323,855,360;
    budget 0.3 -> int(150323855360 * 0.3) = 45,097,156,608 -> per chiplet 11,274,289,152 = 10,752 MiB.
    Non-KV: (0,0) 4 GiB + 1 GiB = 5,120 MiB, (0,1) (0,2) 4,096 MiB, (0,3) 4,608 MiB.
    KV at N on each chiplet: align(144 MiB * N) = 144 N MiB.
    (0,0): 144 N <= 10,752 - 5,120 = 5,632 -> N <= 39 (40 needs 5,760). (0,3) would allow 42.
    Full pool 40 does not fit; the binary search gives 39 >= floor 9 -> 39, tightest (0,0),
    headroom 5,632 - 39 * 144 = 16 MiB. No warning: the report covers the family's 4 chiplets."""
    report = AllocationReport(
        alloc={
            "prefill": {"weights": ((4 * GiB, 4 * GiB, 4 * GiB, 4 * GiB + 512 * MiB),)},
            "decode": {"workspace": ((1 * GiB,),)},
        },
        kv_tensors=one_tensor_per_chiplet(144 * MiB),
    )
    res = estimate(Request(npu="RBLN-CR03", memory_budget=0.3, **FLASH_8), report)
    assert res.ok, res.error
    assert res.kvcache_num_blocks == 39
    assert res.breakdown is not None
    assert res.breakdown.tightest_chiplet == (0, 0)
    assert res.breakdown.headroom_bytes == 16 * MiB
    assert res.breakdown.non_kv_bytes == ((5 * GiB, 4 * GiB, 4 * GiB, 4 * GiB + 512 * MiB),)
    assert res.warnings == ()


ONE_CHIPLET = AllocationReport(
    alloc={
        "prefill": {"weights": ((100 * GiB,),), "DramTensor": ((GiB, GiB, GiB, GiB),)},
        "decode": {"DramTensor": ((GiB, GiB, GiB, GiB),)},
    },
    kv_tensors={"k": KVTensor(True, ((512 * MiB,),)), "v": KVTensor(True, ((512 * MiB,),))},
)


def test_a_whole_report_with_one_chiplet_on_rebel_resolves_over_one_chiplet() -> None:
    """0.12.0: the DramTensor keys are skipped before their buckets are recorded, so the only bucket
    is (0,0) and num_chiplets = 0 + 1 = 1. available_total = (144 GiB // 1 - 1 GiB) * 1 =
    153,545,080,832. Budget 0.8 -> int(153545080832 * 0.8) = 122,836,064,665 bytes, all on (0,0).
    Room after 100 GiB: 122,836,064,665 - 107,374,182,400 = 15,461,882,265.
    KV at N: 2 * align(512 MiB * N) = N GiB; 14 GiB = 15,032,385,536 fits, 15 GiB does not -> 14
    (>= floor 9). Headroom 15,461,882,265 - 15,032,385,536 = 429,496,729.
    Over the family's 4 chiplets the same 100 GiB would not fit in one chiplet's 30 GiB at all."""
    res = estimate(Request(npu="RBLN-CR03", memory_budget=0.8, **FLASH_8), ONE_CHIPLET)
    assert res.ok, res.error
    assert res.kvcache_num_blocks == 14
    assert res.breakdown is not None
    assert (res.breakdown.num_chiplets, res.breakdown.available_bytes) == (1, 153_545_080_832)
    assert res.breakdown.budget_bytes == res.breakdown.budget_per_chiplet == 122_836_064_665
    assert res.breakdown.headroom_bytes == 429_496_729
    (warning,) = res.warnings
    assert "covers 1 chiplet(s) per device" in warning and "RBLN-CR03 (Rebel100) has 4" in warning
    assert "153545080832" in warning


def test_a_one_chiplet_report_moves_the_dram_limit_as_in_the_reference() -> None:
    """0.12.0 compares a byte budget with available_total = 153,545,080,832 for this report:
    "141GB" = 151,397,597,184 is accepted (room 151,397,597,184 - 100 GiB = 44,023,414,784 holds the
    full pool's 40 GiB), "150GB" = 161,061,273,600 exceeds it, with the specification's message."""
    ok = estimate(Request(npu="RBLN-CR03", memory_budget="141GB", **FLASH_8), ONE_CHIPLET)
    assert ok.ok and ok.kvcache_num_blocks == 40
    over = estimate(Request(npu="RBLN-CR03", memory_budget="150GB", **FLASH_8), ONE_CHIPLET)
    assert over.error_kind == "budget_exceeds_dram"
    assert over.error == (
        "memory_budget (161061273600 bytes) exceeds the target NPU's available DRAM (153545080832 bytes)."
    )
    assert any("covers 1 chiplet(s)" in w for w in over.warnings)


def test_the_chiplet_warning_reaches_json_lines() -> None:
    line = json.dumps({"npu": "RBLN-CR03", "memory_budget": 0.8, **FLASH_8, **ONE_CHIPLET.to_json()})
    result = handle_line(line, 1)
    assert result is not None and result["kvcache_num_blocks"] == 14
    assert len(result["warnings"]) == 1 and "RBLN-CR03 (Rebel100) has 4" in result["warnings"][0]


def test_a_node_missing_from_one_graph_counts_zero_there() -> None:
    """0.12.0 on ATOM-Max, 2 devices: prefill lists both nodes, decode's workspace only node 0.
    Buckets (0,0): 10 GiB + 1 GiB = 11 GiB, (1,0): 10 GiB; num_chiplets 1; available 16,877,879,296.
    Budget 0.75 -> int(16877879296 * 0.75) = 12,658,409,472 per chiplet.
    Room: node 0 12,658,409,472 - 11,811,160,064 = 847,249,408 = 808 MiB; node 1 1,832 MiB.
    KV at N: 2 * align(30 MiB * N) = 60 N MiB: node 0 allows 13 (780 MiB; 14 needs 840), node 1 30.
    -> 13 (>= floor 9), tightest (0,0), headroom 28 MiB."""
    report = AllocationReport(
        alloc={
            "prefill": {"weights": ((10 * GiB,), (10 * GiB,))},
            "decode": {"workspace": ((1 * GiB,),)},
        },
        kv_tensors={name: KVTensor(True, ((30 * MiB,), (30 * MiB,))) for name in ("k", "v")},
    )
    res = estimate(Request(npu="RBLN-CA25", num_devices=2, memory_budget=0.75, **FLASH_8), report)
    assert res.ok, res.error
    assert res.kvcache_num_blocks == 13
    assert res.breakdown is not None
    assert res.breakdown.tightest_chiplet == (0, 0)
    assert res.breakdown.headroom_bytes == 28 * MiB
    assert res.breakdown.non_kv_bytes == ((11 * GiB,), (10 * GiB,))
    assert res.warnings == ()


def test_a_report_with_fewer_nodes_than_devices_resolves_and_warns() -> None:
    """0.12.0 never compares the report's nodes with the device count: a 1-node report under
    num_devices=2 resolves exactly as under num_devices=1 (the previous test's node 1 alone:
    room 1,832 MiB -> 30 blocks, full pool 40 -> 30). The missing node shows as zeros."""
    report = AllocationReport(
        alloc={"prefill": {"weights": ((10 * GiB,),)}},
        kv_tensors={name: KVTensor(True, ((30 * MiB,),)) for name in ("k", "v")},
    )
    alone = estimate(Request(npu="RBLN-CA25", memory_budget=0.75, **FLASH_8), report)
    two = estimate(Request(npu="RBLN-CA25", num_devices=2, memory_budget=0.75, **FLASH_8), report)
    assert alone.kvcache_num_blocks == two.kvcache_num_blocks == 30
    assert alone.warnings == ()
    (warning,) = two.warnings
    assert "covers 1 node(s)" in warning and "num_devices is 2" in warning
    assert two.breakdown is not None and two.breakdown.non_kv_bytes == ((10 * GiB,), (0,))
