"""A released cell as the Hub serves it, offline: a huggingface_hub cache snapshot made from its folder,
and a script that loads cells by repo id from there (optimum-rbln, tokenizer, generation config)."""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["LOAD", "snapshot"]


def snapshot(cache: Path, repo: str, folder: Path) -> None:
    """The huggingface_hub cache layout of ``repo`` at one revision, its files copied from ``folder``."""
    base = cache / f"models--{repo.replace('/', '--')}"
    revision = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(folder, base / "snapshots" / revision)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(revision)


# python -c LOAD REPO...: prints {repo: [kvcache_num_blocks, ids of "Hello there", eos_token_id]} as JSON
LOAD = """
import json, sys
from optimum.rbln import RBLNAutoModelForCausalLM
from transformers import AutoTokenizer, GenerationConfig
out = {}
for repo in sys.argv[1:]:
    model = RBLNAutoModelForCausalLM.from_pretrained(repo, export=False, rbln_create_runtimes=False)
    tok = AutoTokenizer.from_pretrained(repo)
    gen = GenerationConfig.from_pretrained(repo)
    out[repo] = [model.rbln_config.kvcache_num_blocks, tok("Hello there")["input_ids"], gen.eos_token_id]
print(json.dumps(out))
"""
