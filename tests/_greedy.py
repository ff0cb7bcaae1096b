"""What ``python -m rbln_build.run`` is compared with: transformers' own greedy ``generate``.

Shared by test_run_chat.py (tiny checkpoints, default and slow suites) and test_smollm2_chat.py (the
real SmolLM2 weights, slow suite). The reference loads the checkpoint with ``from_pretrained`` in the
dtype it was saved in and transformers' default attention (``sdpa``), and runs one prompt at a time
without padding, as a user would; ``run --prompt`` and ``run --chat`` must print what it decodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["Reference", "PROMPTS", "QUESTIONS", "long_prompt", "run_output"]

# Multilingual raw prompts (Latin, Cyrillic, CJK, Arabic, Devanagari, Greek scripts; code; numbers).
PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "Die Hauptstadt von Deutschland ist",
    "La capitale de l'Italie est",
    "東京は日本の首都で",
    "Привет, как дела? Сегодня",
    "1, 2, 3, 5, 8, 13,",
    "El perro come",
    "import numpy as np\n",
    "Q: What is 2+2?\nA:",
    "مرحبا، كيف حالك",
    "नमस्ते, आप कैसे हैं",
    "Η Αθήνα είναι",
    "SELECT name FROM users WHERE",
    "The first law of thermodynamics states that",
]
QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Wie spät ist es in Berlin?",
    "¿Cuál es el río más largo del mundo?",
    "日本で一番高い山は何ですか?",
    "Explain a KV cache in one sentence.",
    "Как тебя зовут?",
    "List three prime numbers.",
]


def long_prompt(tokenizer: Any, at_least: int, seed: int = 0) -> str:
    """Text of at least ``at_least`` tokens, made of the prompts above in a seeded order."""
    import random

    rng = random.Random(seed)
    parts: list[str] = []
    while len(tokenizer(" ".join(parts))["input_ids"]) < at_least:
        parts.append(rng.choice(PROMPTS))
    return " ".join(parts)


class Reference:
    """transformers' greedy generate on a checkpoint folder, in ``dtype``."""

    def __init__(self, checkpoint: Path, dtype: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
        self.model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=getattr(torch, dtype)).eval()
        assert self.model.config._attn_implementation == "sdpa"  # transformers' default, what users get

    def chat_ids(self, question: str) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
        )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def ids(self, prompt: str) -> list[int]:
        return list(self.tokenizer(prompt)["input_ids"])

    def generate(self, ids: list[int], max_new_tokens: int) -> list[int]:
        """New token ids, stopping at the generation config's eos ids (as ``run`` does)."""
        import torch

        # The attention mask is given, as tokenizer(...) gives it: without one, generate takes every pad
        # token id in the prompt for padding and masks it out -- SmolLM2's pad id is <|im_end|>, which its
        # chat template writes after every message.
        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=max_new_tokens,
                do_sample=False,
            )
        return [int(t) for t in out[0, len(ids) :]]

    def text(self, ids: list[int], max_new_tokens: int) -> str:
        return str(self.tokenizer.decode(self.generate(ids, max_new_tokens), skip_special_tokens=True))


def run_output(cell: Path, flag: str, texts: list[str], max_new_tokens: int, capsys: Any) -> str:
    """What ``python -m rbln_build.run CELL --prompt|--chat T ...`` prints, run in this process."""
    from rbln_build.run import main

    argv = [str(cell), "--max-new-tokens", str(max_new_tokens)]
    for text in texts:
        argv += [flag, text]
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    return str(out.out)
