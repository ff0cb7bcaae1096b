"""Tiny local Hugging Face checkpoints with a real tokenizer, for the checkpoint-fidelity and release tests.

``make_checkpoint(dir, "llama" | "qwen3")`` writes what ``save_pretrained`` writes for a tiny causal LM
(``config.json``, ``model.safetensors``), plus:

* a byte-level BPE tokenizer trained offline with the ``tokenizers`` library on text this module
  generates (deterministic: fixed corpus, fixed trainer settings), wrapped in transformers'
  ``PreTrainedTokenizerFast`` with special tokens and a chat template, saved beside the weights;
* ``generation_config.json`` with two end-of-sequence ids and sampling defaults (``do_sample``,
  ``temperature``, ``top_p``, ``top_k``): what an instruction-tuned checkpoint ships.

The weights are the project's seeded weights (``backends.torch._weights.seeded_state_dict``), so a
tiny random model has well-separated logits and greedy decoding does not hinge on float rounding.
The model's ``vocab_size`` is the tokenizer's size, so every id the model can produce decodes.

Also ``greedy_text(dir, prompt, n)``: transformers' own greedy ``generate`` + ``decode`` on the
checkpoint, the reference that ``python -m rbln_build.run CELL --prompt`` is compared with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "make_checkpoint",
    "greedy_text",
    "TOKENIZER_FILES",
    "EOS_IDS",
    "GENERATION_DEFAULTS",
    "PROMPT",
]

# The files make_checkpoint's tokenizer writes (transformers 5's PreTrainedTokenizerFast.save_pretrained).
TOKENIZER_FILES = ("chat_template.jinja", "tokenizer.json", "tokenizer_config.json")
SPECIAL = ("<unk>", "<s>", "</s>", "<|im_end|>", "<pad>")  # ids 0..4, in this order
EOS_IDS = [2, 3]  # </s> and <|im_end|>: two end-of-sequence ids
GENERATION_DEFAULTS = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20}
CHAT_TEMPLATE = (
    "{% for message in messages %}<s>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)
PROMPT = "the quick brown fox reads a tiny model card"

_WORDS = (
    "the quick brown fox jumps over lazy dog model card release tiny llama qwen npu cache block "
    "budget memory tokenizer serve verify build cell artifact rebel atom chiplet device page kv "
    "sequence batch prefill decode greedy sample text reads writes a an of to and"
).split()

_ARCHS: dict[str, dict[str, Any]] = {
    "llama": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
    },
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        "use_sliding_window": False,
        "sliding_window": None,
    },
}


def corpus(lines: int = 400) -> list[str]:
    """Deterministic training text: word sequences from a fixed list, stepped by fixed strides."""
    out = []
    n = len(_WORDS)
    for i in range(lines):
        out.append(" ".join(_WORDS[(i * 7 + j * (i % 5 + 1)) % n] for j in range(6 + i % 9)))
    return out


def make_tokenizer(vocab_size: int = 320) -> Any:
    """A byte-level BPE trained offline on ``corpus()``, as a transformers PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        additional_special_tokens=["<|im_end|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def make_checkpoint(
    directory: Path, arch: str = "llama", seed: int = 0, dtype: str = "float32", near_ties: bool = False
) -> Path:
    """A tiny ``arch`` checkpoint in ``directory`` (created): weights, config, tokenizer, generation config.

    ``near_ties``: transformers' own initialization (normal, ``initializer_range``) from ``seed`` instead
    of the seeded wide-margin weights: the top logits are close, so greedy tokens change with any
    difference in rounding -- what a test of bit-exact computation needs."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    from rbln_build.backends.torch._weights import seeded_state_dict

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer()
    fields = dict(_ARCHS[arch], vocab_size=len(tokenizer), bos_token_id=1, eos_token_id=2, pad_token_id=4)
    model_type = fields.pop("model_type")
    fields.pop("architectures")
    config = AutoConfig.for_model(model_type, **fields)
    torch_dtype = getattr(torch, dtype)
    with torch.random.fork_rng(), torch.device("cpu"):  # transformers' init draws from the global generator
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    if not near_ties:
        with torch.no_grad():
            params = dict(model.named_parameters())
            for name, value in seeded_state_dict(model, seed).items():
                params[name].copy_(value.to(torch_dtype))
    model.generation_config = GenerationConfig(
        bos_token_id=1, eos_token_id=list(EOS_IDS), pad_token_id=4, **GENERATION_DEFAULTS
    )
    model.eval().save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def checkpoint_files(directory: Path) -> dict[str, bytes]:
    """The tokenizer files and generation_config.json of a checkpoint, by name (what a cell must carry)."""
    names = [*TOKENIZER_FILES, "generation_config.json"]
    return {n: (Path(directory) / n).read_bytes() for n in names if (Path(directory) / n).is_file()}


def greedy_text(directory: Path, prompt: str = PROMPT, max_new_tokens: int = 8) -> str:
    """transformers' greedy generate + decode on the checkpoint (the reference for ``run --prompt``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(directory))
    model = AutoModelForCausalLM.from_pretrained(str(directory), attn_implementation="eager").eval()
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
    return str(tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True))


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))
