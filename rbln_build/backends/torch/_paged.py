"""A paged KV cache around a transformers causal LM, and its ``torch.export``.

The wrapper reuses the HF model's embeddings, norms, RoPE, projections and MLP unchanged and
swaps only the attention function, through transformers' attention-function registry
(``AttentionInterface``, name ``"rbln_paged"``); that function calls
``scaled_dot_product_attention`` as transformers' default ``sdpa`` attention does. It never calls HF's mask helpers: they do not
know a custom attention name and can return no mask at all, so the masks are built here, one
per layer type (a sliding-window layer gets a causal mask limited to its window).

One program serves prefill and decode:

    logits = program(input_ids [B, T], cache_position [B, T], block_table [B, W], key_positions [K], *kv_pools)

* ``kv_pools``: per layer a K pool and a V pool, each ``[num_blocks, kv_heads, block_size,
  head_dim]``, in the order k0, v0, k1, v1, ... The program writes the new tokens' K/V into
  them in place and reads each row's history through its block table.
* ``block_table[b, i]`` is the pool block that holds positions ``i*block_size ..`` of row b;
  entries past a row's last used block may be any valid block (they are masked out).
* ``cache_position[b, t]`` is the absolute position of token t of row b (also the RoPE position).
* ``key_positions`` is ``arange(K)``: the keys read are positions ``0 .. K-1`` of each row (at most
  ``W * block_size``), masked per query. The runtime gives exactly the positions a sequence has:
  the attention kernel rounds differently with more keys, even masked ones.
* ``logits``: ``[B, vocab]`` for the last token of each row.

The runtime calls it as transformers' ``generate`` runs one prompt, so bf16 tokens are the same:
the whole prompt in one call (``B = 1``, ``T`` up to ``max_seq_len``), then ``B = 1``, ``T = 1`` per
token (chunks and batches work too, but round differently). ``num_blocks``, ``B``, ``T``, ``W`` and
``K`` are dynamic dimensions of the export, so one export serves every pool size (every budget) of
a compile key.

Sliding-window layers keep their K/V in the same pool as full-attention layers and apply their
window through the mask: numerically what HF computes, but without optimum-rbln's separate,
fixed-size local cache (see docs/backends.md).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...errors import BuildError

__all__ = [
    "ATTN_NAME",
    "SUPPORTED_MODEL_TYPES",
    "PagedCausalLM",
    "export_paged",
    "empty_pools",
    "export_count",
    "strip_source_paths",
]

ATTN_NAME = "rbln_paged"

_export_lock = threading.Lock()
_EXPORTS = 0


def export_count() -> int:
    """How many times ``export_paged`` ran in this process (tests prove exports are shared)."""
    return _EXPORTS


@dataclass
class _PagedStep:
    """What the attention function needs beyond q/k/v; passed through the layers' ``**kwargs``."""

    pools: tuple[torch.Tensor, ...]
    write_blocks: torch.Tensor  # [B*T] pool block of each new token
    write_offsets: torch.Tensor  # [B*T] offset inside that block
    block_table: torch.Tensor  # [B, W]
    key_positions: torch.Tensor  # [K] positions 0 .. K-1: the keys each row reads


def _paged_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    step: _PagedStep = kwargs["rbln_paged"]
    assert attention_mask is not None, "the paged wrapper always passes its own mask"
    layer = module.layer_idx
    k_pool, v_pool = step.pools[2 * layer], step.pools[2 * layer + 1]
    batch, kv_heads, tokens, head_dim = key.shape
    # Write this step's K/V into the pool: pool[block, :, offset, :] = k[b, :, t, :].
    k_pool[step.write_blocks, :, step.write_offsets] = key.transpose(1, 2).reshape(batch * tokens, kv_heads, head_dim)
    v_pool[step.write_blocks, :, step.write_offsets] = value.transpose(1, 2).reshape(batch * tokens, kv_heads, head_dim)
    # Read each row's history through its block table: [B, W, H, bs, D] -> [B, H, W*bs, D].
    # Read positions key_positions (0 .. K-1) of each row through its block table: [B, K, H, D] ->
    # [B, H, K, D]. Exactly these, not whole blocks: transformers attends over exactly the positions a
    # sequence has, and the attention kernel rounds differently with more keys, even masked ones.
    block_size = k_pool.shape[2]
    blocks = step.block_table[:, torch.div(step.key_positions, block_size, rounding_mode="floor")]  # [B, K]
    offsets = torch.remainder(step.key_positions, block_size)[None, :].expand_as(blocks)
    keys = k_pool[blocks, :, offsets].permute(0, 2, 1, 3).contiguous()
    values = v_pool[blocks, :, offsets].permute(0, 2, 1, 3).contiguous()
    groups = query.shape[1] // kv_heads
    if groups > 1:
        keys = keys.repeat_interleave(groups, dim=1)
        values = values.repeat_interleave(groups, dim=1)
    # transformers' own "sdpa" attention (its default): the same kernel on the same K keys. With an
    # all-zero mask (no padding) the result equals its unmasked or is_causal call to the bit.
    out = torch.nn.functional.scaled_dot_product_attention(
        query, keys, values, attn_mask=attention_mask, scale=scaling
    )  # [B, Hq, T, D]
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_NAME, _paged_attention)


_register()


# Model types whose decoder layers take (hidden, attention_mask, position_ids, past_key_values,
# use_cache, position_embeddings, **kwargs) with one RoPE for all layers and no logit soft-capping.
# Others (Gemma 3: per-layer-type RoPE, scaled queries, soft-capping) would compute wrong tokens.
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def _decoder_parts(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    model_type = getattr(model.config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise BuildError(
            f"model_type {model_type!r}: the torch backend's paged wrapper supports "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}; build this recipe as a plan (weights: null) or add support "
            "in rbln_build/backends/torch/_paged.py with a token-equality test."
        )
    body = getattr(model, "model", None)
    needed = ("embed_tokens", "layers", "norm", "rotary_emb")
    if body is None or not all(hasattr(body, n) for n in needed) or not hasattr(model, "lm_head"):
        raise TypeError(
            f"{type(model).__name__}: the paged wrapper supports decoder-only HF models laid out as "
            "model.{embed_tokens, layers, norm, rotary_emb} + lm_head (Llama, Qwen2/3, Mistral)."
        )
    return body, model.lm_head


class PagedCausalLM(nn.Module):
    """``model`` with its attention swapped for paged attention over caller-owned KV pools."""

    def __init__(self, model: nn.Module, block_size: int) -> None:
        super().__init__()
        self.body, self.lm_head = _decoder_parts(model)
        config = model.config
        config._attn_implementation = ATTN_NAME
        self.block_size = int(block_size)
        num_layers = int(config.num_hidden_layers)
        window = getattr(config, "sliding_window", None)
        types = getattr(config, "layer_types", None)
        if types is None:  # Mistral: one window for every layer when sliding_window is set
            uses_window = window is not None and getattr(config, "use_sliding_window", True)
            types = ["sliding_attention" if uses_window else "full_attention"] * num_layers
        self.layer_types: tuple[str, ...] = tuple(types)
        self.sliding_window: int | None = int(window) if window and "sliding_attention" in self.layer_types else None
        self.num_layers = num_layers
        self.kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
        self.vocab_size = int(config.vocab_size)
        self.dtype = next(model.parameters()).dtype

    def _masks(
        self, cache_position: torch.Tensor, key_positions: torch.Tensor, dtype: torch.dtype
    ) -> dict[str, torch.Tensor]:
        key_pos = key_positions[None, None, :]
        query_pos = cache_position[:, :, None]
        allowed = {"full_attention": key_pos <= query_pos}
        if self.sliding_window is not None:
            allowed["sliding_attention"] = (key_pos <= query_pos) & (query_pos - key_pos < self.sliding_window)
        low = torch.finfo(dtype).min
        zero = torch.zeros((), dtype=dtype)
        return {kind: torch.where(ok, zero, low)[:, None, :, :] for kind, ok in allowed.items()}

    def forward(
        self,
        input_ids: torch.Tensor,
        cache_position: torch.Tensor,
        block_table: torch.Tensor,
        key_positions: torch.Tensor,
        *kv_pools: torch.Tensor,
    ) -> torch.Tensor:
        batch, tokens = input_ids.shape
        logical_block = torch.div(cache_position, self.block_size, rounding_mode="floor")
        step = _PagedStep(
            pools=kv_pools,
            write_blocks=torch.gather(block_table, 1, logical_block).reshape(batch * tokens),
            write_offsets=torch.remainder(cache_position, self.block_size).reshape(batch * tokens),
            block_table=block_table,
            key_positions=key_positions,
        )
        hidden = self.body.embed_tokens(input_ids)
        position_embeddings = self.body.rotary_emb(hidden, position_ids=cache_position)
        masks = self._masks(cache_position, key_positions, hidden.dtype)
        for index, layer in enumerate(self.body.layers[: self.num_layers]):
            hidden = layer(
                hidden,
                attention_mask=masks[self.layer_types[index]],
                position_ids=cache_position,
                past_key_values=None,
                use_cache=False,
                position_embeddings=position_embeddings,
                rbln_paged=step,
            )
        hidden = self.body.norm(hidden[:, -1, :])
        return self.lm_head(hidden)


def empty_pools(paged: PagedCausalLM | dict[str, Any], num_blocks: int) -> list[torch.Tensor]:
    """Zeroed K/V pools (k0, v0, k1, v1, ...) of exactly ``num_blocks`` blocks each."""
    if isinstance(paged, PagedCausalLM):
        layers, heads, block, dim, dtype = (
            paged.num_layers,
            paged.kv_heads,
            paged.block_size,
            paged.head_dim,
            paged.dtype,
        )
    else:
        layers, heads, block, dim = (paged[k] for k in ("num_layers", "kv_heads", "block_size", "head_dim"))
        dtype = getattr(torch, paged["dtype"])
    return [torch.zeros(num_blocks, heads, block, dim, dtype=dtype) for _ in range(2 * layers)]


def strip_source_paths(program: torch.export.ExportedProgram) -> None:
    """Drop the per-node Python stack traces: they hold absolute source paths of this machine."""
    for module in program.graph_module.modules():
        graph = getattr(module, "graph", None)
        for node in graph.nodes if graph is not None else ():
            node.meta.pop("stack_trace", None)


def export_paged(
    paged: PagedCausalLM, *, max_batch: int, max_tokens: int, max_table_blocks: int, max_num_blocks: int
) -> torch.export.ExportedProgram:
    """Export ``paged`` once with batch, token count, block-table width, key count and pool size dynamic."""
    global _EXPORTS
    from torch.export import Dim

    # Distinct example sizes (all >= 2) so no two dynamic dims are unified by their example values.
    ex_batch, ex_tokens, ex_width, ex_blocks, ex_keys = 2, 3, 2, 5, 4
    batch = Dim("batch", min=1, max=max(max_batch, ex_batch))
    tokens = Dim("tokens", min=1, max=max(max_tokens, ex_tokens))
    width = Dim("table_blocks", min=1, max=max(max_table_blocks, ex_width))
    num_blocks = Dim("num_blocks", min=1, max=max(max_num_blocks, ex_blocks))
    keys = Dim("keys", min=1, max=max(max_table_blocks * paged.block_size, ex_keys))
    input_ids = torch.zeros(ex_batch, ex_tokens, dtype=torch.long)
    cache_position = torch.arange(1, 1 + ex_tokens).repeat(ex_batch, 1)
    block_table = torch.tensor([[0, 1], [2, 3]], dtype=torch.long)
    key_positions = torch.arange(ex_keys)
    pools = empty_pools(paged, ex_blocks)
    dynamic_shapes = (
        {0: batch, 1: tokens},
        {0: batch, 1: tokens},
        {0: batch, 1: width},
        {0: keys},
        tuple({0: num_blocks} for _ in pools),  # the *kv_pools varargs, as one group
    )
    with _export_lock, torch.no_grad():
        program = torch.export.export(
            paged,
            (input_ids, cache_position, block_table, key_positions, *pools),
            dynamic_shapes=dynamic_shapes,
            strict=False,
        )
        _EXPORTS += 1
    return program
