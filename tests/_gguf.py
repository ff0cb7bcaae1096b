"""A tiny Llama GGUF written in the test (gguf's GGUFWriter): a byte-level BPE tokenizer trained
offline with `tokenizers`, seeded weights, linear layers quantized to Q8_0 (so loading de-quantizes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

VOCAB_TEXT = ["the quick brown fox jumps over the lazy dog", "hello world, hello npu", "a b c d e f g"] * 20
HIDDEN, HEADS, KV_HEADS, FFN, LAYERS = 64, 2, 1, 64, 2
CHAT_TEMPLATE = "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"


def _tokenizer() -> tuple[list[str], list[int], list[str]]:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(VOCAB_TEXT, trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    types = [3 if t in ("<unk>", "<s>", "</s>") else 1 for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, types, merges


def write_tiny_gguf(path: Path, arch: str = "llama", license: str | None = "mit", seed: int = 0) -> Path:
    """A complete tiny GGUF at ``path`` (the same bytes for the same arguments)."""
    import gguf

    tokens, types, merges = _tokenizer()
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("Tiny GGUF Llama")
    w.add_organization("rbln-build-tests")
    if license:
        w.add_license(license)
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_vocab_size(len(tokens))
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    def tensor(name: str, shape: tuple[int, ...], quantize: bool) -> None:
        data = (rng.standard_normal(shape) * (0.5 if len(shape) > 1 else 0.05) + (0 if len(shape) > 1 else 1)).astype(
            np.float32
        )
        if quantize:
            q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, data)

    head_dim = HIDDEN // HEADS
    tensor("token_embd.weight", (len(tokens), HIDDEN), True)
    for i in range(LAYERS):
        tensor(f"blk.{i}.attn_norm.weight", (HIDDEN,), False)
        tensor(f"blk.{i}.attn_q.weight", (HEADS * head_dim, HIDDEN), True)
        tensor(f"blk.{i}.attn_k.weight", (KV_HEADS * head_dim, HIDDEN), True)
        tensor(f"blk.{i}.attn_v.weight", (KV_HEADS * head_dim, HIDDEN), True)
        tensor(f"blk.{i}.attn_output.weight", (HIDDEN, HEADS * head_dim), True)
        tensor(f"blk.{i}.ffn_norm.weight", (HIDDEN,), False)
        tensor(f"blk.{i}.ffn_gate.weight", (FFN, HIDDEN), True)
        tensor(f"blk.{i}.ffn_up.weight", (FFN, HIDDEN), True)
        tensor(f"blk.{i}.ffn_down.weight", (HIDDEN, FFN), True)
    tensor("output_norm.weight", (HIDDEN,), False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
