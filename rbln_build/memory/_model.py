"""The NPU memory model: a recipe + its parameter inventory → an AllocationReport.

Without the proprietary compiler this module stands in for what ``rebel`` reports after compiling
a decoder-only model with optimum-rbln 0.12.0. Every term lives here, with its source:

Placement (per device = one node of a tensor-parallel group)
  * The input embedding stays on the host: optimum-rbln keeps ``embed_tokens`` as a CPU module
    (``use_inputs_embeds`` path, ``_create_embedding_layer``) — 0 bytes on the NPU. A tied model's
    embedding matrix is still needed on the NPU as the lm_head weight, so it is charged once there.
  * Decoder layers are placed over a device's chiplets in contiguous ranges, the larger ranges
    first (36 layers on 4 chiplets: 9/9/9/9; 26: 7/7/6/6), and each layer's K and V caches sit
    with the layer. The final norm and the lm_head go to the last chiplet (the end of the
    pipeline), which is therefore the tightest one on RBLN-CR. Decision of this model; the
    compiler's real placement is not published.
  * Tensor parallelism over ``num_devices``: attention projections are split by heads
    (q: ``ceil(heads / n)`` heads, k/v: ``ceil(num_key_value_heads / n)`` heads, o_proj's input
    likewise), the MLP's gate/up by output rows and down_proj by input columns
    (``ceil(dim / n)``), the lm_head by vocabulary rows; norms are replicated.
  * Every tensor is rounded up to 2 MiB on every device (``ALIGNMENT`` in ``rbln_build.estimator``):
    the compiler's DRAM allocation granule, the same ``align_2MB`` optimum-rbln applies to the KV
    tensors.

Weights
  * Linear weights take ``weight_bits`` (16: the recipe dtype; 8 or 4: packed integers) plus,
    when quantized, one scale per output row in the recipe dtype (optimum-rbln's per-output-channel
    ``weight_scale``), stored with the weight as one allocation. The lm_head stays in the recipe
    dtype (optimum-rbln quantizes the decoder's linear layers only). Norms stay in the recipe dtype.
  * Weights are reported once, under the prefill graph: the decode graph shares them
    (optimum-rbln compiles every graph with ``CompileContext(use_weight_sharing=True)``).

KV cache (``kv_tensors``, measured at ``current_blocks = 1``)
  * One K and one V tensor per layer, ``past_key_values_{layer}_key`` / ``_value``.
  * Full-attention layer: one block = ``ceil(num_key_value_heads / n)`` heads × ``kvcache_block_size``
    × ``head_dim`` rounded up to 64 × dtype bytes; resizable (``FullAttentionKVCacheMeta``). It is
    reported resizable for eager attention too: the estimator applies the eager rule (full pool).
  * Sliding-window layer: ``batch_size`` blocks of ``sliding_window`` tokens, fixed size, not
    resizable (``SlidingWindowAttentionKVCacheMeta``: one window per batch item).
  * The dtype is the recipe's, or 1 byte for a quantization with ``kv_caches: fp8`` (optimum-rbln's
    ``float8_e4m3fn`` cache, for every layer's cache_meta).

Workspace and runtime buffers (per graph, on every chiplet that runs layers)
  * ``workspace``: activations of one decoder layer for the tokens in flight, times
    ``ACTIVATION_LIVE_SETS`` (the one calibrated constant; see docs/memory-model.md). Per token:
    2 × hidden (residual + normed input) + q, k, v of this device's heads + 3 × this device's MLP
    width (gate, up, their product). Tokens: ``prefill_chunk_size`` in prefill, ``batch_size`` in
    decode. Each compiled graph owns its scratch area, so both graphs carry one.
  * ``runtime_buffers``: each graph's input tensors (optimum-rbln ``get_input_info``: input_ids,
    cache_position, block tables, query_position) on the first chiplet, its logits output on the
    last; each rounded up to 2 MiB.

Pure arithmetic once the inventory exists; no torch at import time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..estimator import AllocationReport, KVTensor, align
from ._inventory import Inventory, TensorEntry, inventory_for_recipe

__all__ = [
    "HEAD_DIM_ALIGNMENT",
    "ACTIVATION_LIVE_SETS",
    "build_report",
    "ModelFacts",
    "model_facts",
    "layer_placement",
    "weight_bytes_per_device",
    "kv_heads_per_device",
    "activation_elems_per_token",
]

HEAD_DIM_ALIGNMENT = 64  # KV-cache head_dim is padded to a multiple of 64
# Calibrated (docs/memory-model.md): live activation sets of one decoder layer per chiplet.
# Any value in [0, 2.46] reproduces both published figures (21 and 14); 1.0 is the physical
# single-buffered value and sits about 1.0 from the lower edge and 1.46 from the upper one.
ACTIVATION_LIVE_SETS = 1.0

_INDEX_BYTES = {"int64": 8, "int32": 4, "int16": 2}
_HEAD_SPLIT_OUT = {"q_proj": "q", "k_proj": "kv", "v_proj": "kv"}
_ROW_PARALLEL = {"o_proj", "down_proj", "out_proj", "dense", "c_proj", "wo", "w2"}


def layer_placement(num_layers: int, num_chiplets: int) -> list[int]:
    """Chiplet of each layer: contiguous ranges, the larger ranges first (26 over 4 → 7/7/6/6)."""
    base, extra = divmod(num_layers, num_chiplets)
    out: list[int] = []
    for chiplet in range(num_chiplets):
        out += [chiplet] * (base + (1 if chiplet < extra else 0))
    return out


def kv_heads_per_device(num_key_value_heads: int, num_devices: int) -> int:
    return math.ceil(num_key_value_heads / num_devices)


@dataclass(frozen=True)
class ModelFacts:
    """The geometry and build facts the terms read."""

    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    num_layers: int
    layer_types: tuple[str, ...]
    sliding_window: int | None
    dtype_bytes: int
    weight_bits: int
    num_devices: int
    num_chiplets: int
    batch_size: int
    max_seq_len: int
    block_size: int
    prefill_chunk_size: int
    kv_dtype_bytes: int | None = None  # an fp8 KV cache (a quantization's kv_caches): 1; None: dtype_bytes


def _module_name(entry: TensorEntry) -> str:
    parts = entry.name.split(".")
    return parts[-2] if len(parts) >= 2 else ""


def _device_shape(entry: TensorEntry, m: ModelFacts) -> tuple[int, ...]:
    """The shard of ``entry`` one device holds under tensor parallelism."""
    n = m.num_devices
    shape = entry.shape
    if n == 1 or entry.role in ("norm", "other", "embedding") or not shape:
        return shape
    if entry.role == "lm_head":
        return (math.ceil(shape[0] / n),) + shape[1:]
    module = _module_name(entry)
    if module in _ROW_PARALLEL:
        if len(shape) == 1:  # a row-parallel bias is added once, after the reduction
            return shape
        cols = m.heads * m.head_dim == shape[1] and module == "o_proj"
        width = math.ceil(m.heads / n) * m.head_dim if cols else math.ceil(shape[1] / n)
        return (shape[0], width) + shape[2:]
    split = _HEAD_SPLIT_OUT.get(module)
    if split == "q" and shape[0] == m.heads * m.head_dim:
        rows = math.ceil(m.heads / n) * m.head_dim
    elif split == "kv" and shape[0] == m.kv_heads * m.head_dim:
        rows = kv_heads_per_device(m.kv_heads, n) * m.head_dim
    else:
        rows = math.ceil(shape[0] / n)
    return (rows,) + shape[1:]


def weight_bytes_per_device(entry: TensorEntry, m: ModelFacts) -> int:
    """Unaligned bytes of ``entry``'s shard on one device, with quantization applied."""
    shape = _device_shape(entry, m)
    numel = math.prod(shape)
    if entry.role == "linear" and len(shape) == 2 and m.weight_bits < 16:
        packed = -(-numel * m.weight_bits // 8)
        scales = shape[0] * m.dtype_bytes  # one scale per output row
        return packed + scales
    return numel * m.dtype_bytes


def activation_elems_per_token(m: ModelFacts) -> int:
    """Elements of one decoder layer's live activations per token on one device."""
    n = m.num_devices
    qkv = (math.ceil(m.heads / n) + 2 * kv_heads_per_device(m.kv_heads, n)) * m.head_dim
    return 2 * m.hidden + qkv + 3 * math.ceil(m.intermediate / n)


def _grid(per_chiplet: list[int], num_devices: int) -> list[list[int]]:
    return [list(per_chiplet) for _ in range(num_devices)]


def model_facts(spec: Any) -> ModelFacts:
    recipe, att = spec.recipe, spec.attention
    g = recipe.geometry
    return ModelFacts(
        hidden=g.hidden_size,
        intermediate=g.intermediate_size,
        heads=g.num_attention_heads,
        kv_heads=g.num_key_value_heads,
        head_dim=g.head_dim,
        vocab=g.vocab_size,
        num_layers=g.num_layers,
        layer_types=g.layer_types,
        sliding_window=g.sliding_window,
        dtype_bytes=recipe.dtype_bytes,
        weight_bits=recipe.weight_bits,
        num_devices=spec.num_devices,
        num_chiplets=spec.npu.num_chiplets,
        batch_size=att.batch_size,
        max_seq_len=att.max_seq_len,
        block_size=att.kvcache_block_size,
        prefill_chunk_size=att.prefill_chunk_size,
        kv_dtype_bytes=1 if getattr(getattr(spec, "quantized", None), "kv_caches", None) == "fp8" else None,
    )


def _runtime_buffers(m: ModelFacts, graph: str) -> tuple[int, int]:
    """(input bytes on the first chiplet, output bytes on the last) of one graph, each tensor aligned."""
    has_full = "full_attention" in m.layer_types
    has_sliding = "sliding_attention" in m.layer_types
    max_blocks = m.max_seq_len // m.block_size
    if graph == "prefill":
        batch, tokens = 1, m.prefill_chunk_size
        inputs = [("int64", batch * tokens), ("int32", batch * tokens), ("int16", 1)]  # + query_position
        if has_full:
            inputs.append(("int16", max_blocks))
    else:
        batch, tokens = m.batch_size, 1
        inputs = [("int64", batch), ("int32", batch)]
        if has_full:
            inputs.append(("int16", batch * max_blocks))
    if has_sliding:
        inputs.append(("int16", batch))  # local block table
    in_bytes = sum(align(_INDEX_BYTES[dt] * count) for dt, count in inputs)
    logits = align(batch * m.vocab * m.dtype_bytes)  # logits of the last position only
    return in_bytes, logits


def build_report(
    spec: Any,
    inventory: Inventory | None = None,
    *,
    cache_dir: Path | None = None,
    live_sets: float | None = None,
) -> AllocationReport:
    """The AllocationReport of ``spec`` (a ``CompileSpec``) under this memory model.

    ``inventory`` defaults to the recipe's cached meta-device inventory (computed on a miss, which
    imports torch). ``live_sets`` overrides ``ACTIVATION_LIVE_SETS`` (calibration scans only).
    """
    if inventory is None:
        inventory = inventory_for_recipe(spec.recipe, cache_dir=cache_dir)
    m = model_facts(spec)
    alpha = ACTIVATION_LIVE_SETS if live_sets is None else live_sets
    chiplets = m.num_chiplets
    last = chiplets - 1
    placement = layer_placement(m.num_layers, chiplets)

    weights = [0] * chiplets
    host_bytes = 0
    raw_weight_bytes = 0
    for entry in inventory.tensors:
        if entry.role == "embedding":
            host_bytes += entry.numel * m.dtype_bytes
            if not inventory.lm_head_tied:
                continue
            entry = TensorEntry(entry.name, entry.shape, entry.dtype, "lm_head", None)  # tied: lm_head on NPU
        nbytes = weight_bytes_per_device(entry, m)
        raw_weight_bytes += nbytes
        chiplet = placement[entry.layer] if entry.layer is not None and entry.layer < len(placement) else last
        weights[chiplet] += align(nbytes)

    runs_layers = [c in placement for c in range(chiplets)]
    per_token = activation_elems_per_token(m) * m.dtype_bytes
    alloc: dict[str, dict[str, list[list[int]]]] = {}
    workspace_at: dict[str, int] = {}
    for graph, tokens in (("prefill", m.prefill_chunk_size), ("decode", m.batch_size)):
        ws = align(math.ceil(alpha * tokens * per_token))
        workspace_at[graph] = ws
        workspace = [ws if runs_layers[c] else 0 for c in range(chiplets)]
        in_bytes, out_bytes = _runtime_buffers(m, graph)
        buffers = [0] * chiplets
        buffers[0] += in_bytes
        buffers[last] += out_bytes
        keys = {"workspace": _grid(workspace, m.num_devices), "runtime_buffers": _grid(buffers, m.num_devices)}
        if graph == "prefill":
            keys["weights"] = _grid(weights, m.num_devices)
        alloc[graph] = keys

    kv: dict[str, KVTensor] = {}
    heads = kv_heads_per_device(m.kv_heads, m.num_devices)
    head_dim = align(m.head_dim, HEAD_DIM_ALIGNMENT)
    for layer, kind in enumerate(m.layer_types):
        if kind == "sliding_attention" and m.sliding_window is not None:
            nbytes = m.batch_size * heads * m.sliding_window * head_dim * (m.kv_dtype_bytes or m.dtype_bytes)
            resizable = False
        else:
            nbytes = heads * m.block_size * head_dim * (m.kv_dtype_bytes or m.dtype_bytes)
            resizable = True
        row = [0] * chiplets
        row[placement[layer]] = nbytes
        for which in ("key", "value"):
            kv[f"past_key_values_{layer}_{which}"] = KVTensor(can_resize=resizable, sizes=_grid_t(row, m.num_devices))

    notes = {
        "model": "rbln_build.memory (model-based estimate, not a compiler report)",
        "activation_live_sets": alpha,
        "layers_per_chiplet": [placement.count(c) for c in range(chiplets)],
        "host_embedding_bytes": host_bytes,
        "weight_bytes_unaligned_per_device": raw_weight_bytes,
        "workspace_per_chiplet": dict(workspace_at),
        "parameters": inventory.total_parameters,
    }
    return AllocationReport(
        alloc={g: {k: _grid_t_rows(v) for k, v in keys.items()} for g, keys in alloc.items()},
        kv_tensors=kv,
        current_blocks=1,
        notes=notes,
    )


def _grid_t(row: list[int], num_devices: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(row) for _ in range(num_devices))


def _grid_t_rows(rows: list[list[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(r) for r in rows)
