"""``torch.ops.rbln_custom_ops``: the custom ops optimum-rbln 0.12.0's wrappers call while a model is
traced, registered with shape-only (fake) kernels. The stand-in compiler traces under FakeTensorMode,
so nothing is computed; calling an op on real tensors fails, as it would without an NPU.

Every call made while tracing is appended to ``TRACED`` (the op name), so a compiled model can record
which ops its graph holds.
"""

from __future__ import annotations

import sys

import torch

TRACED: list[str] = []


def _trace(name: str) -> None:
    sys.modules[__name__].TRACED.append(name)  # the current module's list, even after a re-import


def _registered() -> bool:  # a second import of the stand-in (tests drop and re-import modules) keeps the first
    try:
        return hasattr(torch.ops.rbln_custom_ops, "linear")
    except RuntimeError:
        return False


_LIB = None if _registered() else torch.library.Library("rbln_custom_ops", "DEF")  # kept alive for the process

# Arguments optimum-rbln 0.12.0 passes by keyword (decoderonly_architecture.py: AttentionOp,
# FlashAttentionOp, SlidingWindowAttentionOp). The caches are written in place on the NPU.
_CACHE = "Tensor q, Tensor k, Tensor v, Tensor(a!) kcache, Tensor(b!) vcache"
_TAIL = "Tensor? k_scale=None, Tensor? v_scale=None, Tensor? s_aux=None"
_PAGED = f"{_CACHE}, Tensor seq, Tensor scale, Tensor block_table, int block_size"

SCHEMAS = {
    "linear": "linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor",
}
for _phase in ("prefill", "decode"):
    _bidir = "bool? is_bidirectional=None, " if _phase == "prefill" else ""
    SCHEMAS[f"paged_causal_attn_{_phase}"] = f"paged_causal_attn_{_phase}({_PAGED}, {_bidir}{_TAIL}) -> Tensor"
    SCHEMAS[f"paged_attn_{_phase}"] = f"paged_attn_{_phase}({_PAGED}, Tensor mask, {_bidir}{_TAIL}) -> Tensor"
    SCHEMAS[f"paged_flash_causal_attn_{_phase}"] = (
        f"paged_flash_causal_attn_{_phase}({_PAGED}, int partition, {_bidir}{_TAIL}) -> Tensor"
    )
    SCHEMAS[f"paged_flash_attn_{_phase}"] = (
        f"paged_flash_attn_{_phase}({_PAGED}, int partition, Tensor mask, {_bidir}{_TAIL}) -> Tensor"
    )
    SCHEMAS[f"paged_sliding_window_attn_{_phase}"] = (
        f"paged_sliding_window_attn_{_phase}({_CACHE}, Tensor cache_seq_len, Tensor cache_offset, Tensor scale, "
        f"Tensor block_table, int block_size, {_bidir}Tensor? attn_mask=None, {_TAIL}) -> Tensor"
    )


def _fake_linear(input, weight, bias=None):  # noqa: A002 - torch's argument name
    _trace("linear")
    if input.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"rbln_custom_ops.linear: input {list(input.shape)} @ weight {list(weight.shape)}")
    return input.new_empty((*input.shape[:-1], weight.shape[0]))


def _fake_attention(name: str):
    def fake(q, k, v, kcache, vcache, *args, **kwargs):
        _trace(name)
        if kcache.shape != vcache.shape or kcache.dim() != 5:
            raise RuntimeError(f"rbln_custom_ops.{name}: caches {list(kcache.shape)} / {list(vcache.shape)}")
        return q.new_empty(q.shape)  # [batch, kv_heads, groups, tokens, head_dim], as the op returns

    return fake


for _name, _schema in SCHEMAS.items() if _LIB is not None else ():
    _LIB.define(_schema)
    torch.library.register_fake(
        f"rbln_custom_ops::{_name}", _fake_linear if _name == "linear" else _fake_attention(_name), lib=_LIB
    )
