"""The memory model's terms against hand-computed numbers."""

from __future__ import annotations

import math
import shutil

import pytest
from memory_helpers import MiB, inventory, report, spec

from rbln_build.estimator import ALIGNMENT, kv_bytes_at
from rbln_build.estimator._report import AllocationReport
from rbln_build.memory._model import build_report, layer_placement, weight_bytes_per_device
from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR, load_recipe


def test_layer_placement_contiguous_larger_ranges_first():
    assert layer_placement(36, 4) == [0] * 9 + [1] * 9 + [2] * 9 + [3] * 9
    assert [layer_placement(26, 4).count(c) for c in range(4)] == [7, 7, 6, 6]
    assert layer_placement(2, 4) == [0, 1]
    assert layer_placement(5, 1) == [0] * 5


def test_qwen3_8b_on_rebel_weights_per_chiplet():
    rep = report("qwen3_8b", "RBLN-CR03")
    # One layer, each tensor aligned to 2 MiB: q 32 + k 8 + v 8 + o 32 + gate/up/down 3*96
    # + 4 norms (8 KiB -> 2 MiB each) = 376 MiB; 9 layers per chiplet.
    layer = 32 + 8 + 8 + 32 + 3 * 96 + 4 * 2
    assert 151_936 * 4096 * 2 == 1187 * MiB  # the lm_head: 1187 MiB, aligned up to 1188
    lm_head, final_norm = 1188, 2
    assert rep.alloc["prefill"]["weights"] == ((9 * layer * MiB,) * 3 + ((9 * layer + lm_head + final_norm) * MiB,),)
    assert "weights" not in rep.alloc["decode"]  # shared with prefill, charged once
    assert rep.notes["host_embedding_bytes"] == 151_936 * 4096 * 2  # the embedding stays on the host


def test_qwen3_8b_tensor_parallel_over_four_atoms():
    rep = report("qwen3_8b", "RBLN-CA25", num_devices=4)
    # Per device: q 8 + k 2 + v 2 + o 8 + gate/up/down 3*24 + 4 norms 2 = 100 MiB per layer;
    # lm_head ceil(151936/4) rows * 4096 * 2 B = 296.75 MiB -> 298; final norm 2.
    assert math.ceil(151_936 / 4) * 4096 * 2 == 296.75 * MiB
    assert rep.alloc["prefill"]["weights"] == (((36 * 100 + 298 + 2) * MiB,),) * 4
    # KV: ceil(8 / 4) = 2 heads per device * 8192 tokens * 128 * 2 B = 4 MiB per block
    assert {t.sizes for t in rep.kv_tensors.values()} == {((4 * MiB,),) * 4}


def test_kv_tensors_one_key_one_value_per_layer_on_the_layers_chiplet():
    rep = report("qwen3_8b", "RBLN-CR03")
    assert len(rep.kv_tensors) == 72 and rep.current_blocks == 1
    k0, v35 = rep.kv_tensors["past_key_values_0_key"], rep.kv_tensors["past_key_values_35_value"]
    assert k0.can_resize and v35.can_resize
    block = 8 * 8192 * 128 * 2  # kv heads * block size * head_dim * bf16 = 16 MiB
    assert k0.sizes == ((block, 0, 0, 0),) and v35.sizes == ((0, 0, 0, block),)


@pytest.mark.parametrize(
    "num_devices, heads",
    [pytest.param(1, 1, id="1dev"), pytest.param(4, 1, id="4dev-replicated")],
)
def test_kv_heads_ceil_over_devices(num_devices, heads):
    # Gemma-3-1B has one KV head: every device keeps a whole head; head_dim 256 is already aligned.
    rep = report("gemma3_1b", "RBLN-CA25", num_devices=num_devices)
    full = rep.kv_tensors["past_key_values_5_key"]
    assert full.can_resize and full.sizes == ((heads * 8192 * 256 * 2,),) * num_devices


def test_head_dim_is_aligned_to_64():
    rep = report("tiny_llama", "RBLN-CA25")
    # tiny_llama: 4 KV heads, head_dim 32 -> 64, block 1024, float32
    assert rep.kv_tensors["past_key_values_0_key"].sizes == ((4 * 1024 * 64 * 4,),)


def test_sliding_window_layers_are_fixed_size():
    rep = report("gemma3_1b", "RBLN-CR03")
    fixed = {n for n, t in rep.kv_tensors.items() if not t.can_resize}
    full_layers = [5, 11, 17, 23]
    assert {n for n in rep.kv_tensors if n not in fixed} == {
        f"past_key_values_{i}_{w}" for i in full_layers for w in ("key", "value")
    }
    # batch 4 windows of 512 tokens, 1 KV head, head_dim 256, bf16 = 1 MiB, whatever the pool
    window = rep.kv_tensors["past_key_values_0_key"]
    assert window.sizes == ((4 * 512 * 256 * 2, 0, 0, 0),)
    # chiplet 0 holds layers 0-6: 0-4 and 6 slide (K and V, each 1 MiB aligned to 2), layer 5 is full
    chiplet0_fixed = 6 * 2 * 2 * MiB
    chiplet0_full = 2 * align_up(4 * MiB)
    for blocks in (1, 7, 16):
        assert kv_bytes_at(rep, blocks)[(0, 0)] == chiplet0_fixed + blocks * chiplet0_full


def align_up(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def test_mistral_every_layer_slides_so_no_tensor_resizes():
    rep = report("mistral_7b_v0_1", "RBLN-CR03")
    assert len(rep.kv_tensors) == 64 and not any(t.can_resize for t in rep.kv_tensors.values())
    assert rep.kv_tensors["past_key_values_0_key"].sizes[0][0] == 4 * 8 * 4096 * 128 * 2  # 32 MiB
    assert kv_bytes_at(rep, 1) == kv_bytes_at(rep, 16)


def _quantized(tmp_path, bits: int):
    root = tmp_path / f"q{bits}"
    shutil.copytree(DEFAULT_RECIPES_DIR / "qwen3_8b", root / "qwen3_8b")
    path = root / "qwen3_8b" / "recipe.yaml"
    path.write_text(path.read_text().replace("weight_bits: 16", f"weight_bits: {bits}"))
    return load_recipe("qwen3_8b", root)


@pytest.mark.parametrize("bits", [pytest.param(8, id="int8"), pytest.param(4, id="int4")])
def test_quantization_shrinks_linear_weights_not_lm_head(tmp_path, bits):
    inv = inventory("qwen3_8b")
    base = spec("qwen3_8b", "RBLN-CR03")
    quant = spec(_quantized(tmp_path, bits), "RBLN-CR03")
    from rbln_build.memory._model import model_facts

    m16, mq = model_facts(base), model_facts(quant)
    for t in inv.tensors:
        b16, bq = weight_bytes_per_device(t, m16), weight_bytes_per_device(t, mq)
        if t.role == "linear":
            # bits/16 of the bf16 bytes, plus one bf16 scale per output row
            assert bq == b16 * bits // 16 + t.shape[0] * 2
        else:
            assert bq == b16  # lm_head, norms (and the host embedding) keep the recipe dtype
    lm_head = 151_936 * 4096 * 2
    assert weight_bytes_per_device(inv.by_role("lm_head")[0], mq) == lm_head

    w16 = report("qwen3_8b", "RBLN-CR03").alloc["prefill"]["weights"][0]
    wq = build_report(quant, inv).alloc["prefill"]["weights"][0]
    # Hand count of chiplet 0 at 8 bits: per layer q 16 MiB + 8 KiB -> 18, k/v 4 MiB + 2 KiB -> 6 each,
    # o 18, gate/up 48 MiB + 24 KiB -> 50 each, down 48 MiB + 8 KiB -> 50, 4 norms 2 each = 206 MiB.
    if bits == 8:
        assert wq[0] == 9 * 206 * MiB
    assert all(q < w for q, w in zip(wq, w16, strict=True))
    # The lm_head chiplet keeps the whole 16-bit lm_head: its excess over chiplet 0 is unchanged.
    assert wq[3] - wq[0] == w16[3] - w16[0]


def test_every_allocation_is_2mib_aligned_and_per_device_identical():
    rep = report("llama3_1_8b", "RBLN-CA25", num_devices=4)
    for keys in rep.alloc.values():
        for grid in keys.values():
            assert all(v % ALIGNMENT == 0 for row in grid for v in row)
            assert len(set(grid)) == 1  # tensor parallelism: every device holds the same shard sizes


def test_workspace_scales_with_prefill_chunk_and_only_on_chiplets_with_layers():
    rep = report("tiny_llama", "RBLN-CR03")  # 2 layers over 4 chiplets: chiplets 2 and 3 run none
    ws = rep.alloc["prefill"]["workspace"][0]
    assert ws[0] == ws[1] > 0 and ws[2] == ws[3] == 0
    big = report("qwen3_8b", "RBLN-CR03", prefill_chunk_size=1024).alloc["prefill"]["workspace"][0][0]
    small = report("qwen3_8b", "RBLN-CR03", prefill_chunk_size=512).alloc["prefill"]["workspace"][0][0]
    # per token: 2*4096 + (32 + 2*8)*128 + 3*12288 = 51,200 bf16 elements; 512 tokens = 50 MiB
    assert (small, big) == (50 * MiB, 100 * MiB)


def test_tied_model_charges_the_lm_head_once_on_the_last_chiplet():
    rep = report("qwen3_0_6b", "RBLN-CR03")
    w = rep.alloc["prefill"]["weights"][0]
    lm_head = align_up(151_936 * 1024 * 2)  # 296.75 MiB -> 298 MiB
    assert w[3] - w[0] == lm_head + 2 * MiB  # plus the final norm; 7 layers on every chiplet


def test_report_round_trips():
    s = spec("qwen3_8b", "RBLN-CR03")
    inv = inventory("qwen3_8b")
    rep = build_report(s, inv)
    assert AllocationReport.from_json(rep.to_json()) == rep
