"""Text in, text out (issue 33, item 3): ``python -m rbln_build.run CELL --prompt`` and ``--chat`` print
exactly what transformers' greedy ``generate`` gives on the same weights, in bfloat16 and in float32.

The checkpoints are tiny Llamas with transformers' own initialization (``near_ties``: the top logits are
close, so a token changes with any difference in rounding), a real BPE tokenizer trained offline with
a chat template, built by the torch backend with 1,024-token blocks (= kvcache_partition_len) into a
pool cut below the full pool. The prompts are multilingual, chat-templated, and long enough to cross
a block and a partition. The reference is transformers' default (sdpa) attention, one prompt at a
time (tests/_greedy.py). The default suite checks 24 prompts per dtype; the slow suite sweeps more
seeds and a Qwen3 checkpoint.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from _checkpoints import EOS_IDS, make_checkpoint
from _greedy import PROMPTS, QUESTIONS, Reference, long_prompt, run_output

from rbln_build.backends import CompileSpec, get_backend
from rbln_build.estimator._npu import resolve_npu
from rbln_build.memory._recipes import load_recipe
from rbln_build.scaffold._recipe import add_recipe

DTYPES = ("bfloat16", "float32")
BLOCK = 1024  # kvcache_partition_len = kvcache_block_size (flash attention)
NEW = 12


def build_cell(checkpoint: Path, root: Path, name: str, num_blocks: int | None = None) -> Path:
    """``recipe add`` + compile + finalize with the torch backend: 2 sequences of 2,048 tokens in
    1,024-token blocks (a full pool of 4), finalized at ``num_blocks`` (default 3: a cut pool)."""
    recipes = root / "recipes"
    add_recipe(name, checkpoint, recipes, None, max_seq_len=2 * BLOCK, batch_size=2)
    recipe = load_recipe(name, root=recipes)
    spec = CompileSpec.for_recipe(
        recipe, resolve_npu("atom_max"), 1, attn_impl="flash_attn", kvcache_partition_len=BLOCK
    )
    assert spec.attention.num_full_blocks == 4 and spec.attention.kvcache_block_size == BLOCK
    base, cell = root / "builds" / name / "base", root / "builds" / name / "cell"
    base.mkdir(parents=True)
    cell.mkdir()
    get_backend("torch").compile(spec, base)
    get_backend("torch").finalize(spec, base, num_blocks or 3, cell)
    return cell


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("chat")
    out: dict[str, Any] = {}
    for dtype in DTYPES:
        checkpoint = make_checkpoint(root / f"ck_{dtype}", "llama", seed=11, dtype=dtype, near_ties=True)
        out[dtype] = (checkpoint, build_cell(checkpoint, root, f"ck_{dtype}"))
    return out


def _prompts(reference: Reference) -> list[list[int]]:
    """24 prompts: 12 raw multilingual, 8 chat-templated questions, 4 long (a block and a partition
    crossed in the prompt, or while generating from just below the boundary)."""
    raw = [reference.ids(p) for p in PROMPTS[:12]]
    chat = [reference.chat_ids(q) for q in QUESTIONS]
    long = [reference.ids(long_prompt(reference.tokenizer, n, seed=n)) for n in (1100, 1400)]
    edge = reference.ids(long_prompt(reference.tokenizer, BLOCK + 40, seed=3))[: BLOCK - 3]  # crosses while decoding
    assert len(long[0]) > BLOCK and len(edge) + NEW > BLOCK
    return raw + chat + long + [edge, edge[: BLOCK // 2]]


@pytest.mark.parametrize("dtype", DTYPES)
def test_cell_tokens_are_transformers_greedy_tokens(built, dtype) -> None:
    from rbln_build.backends.torch._runtime import load_artifact

    checkpoint, cell = built[dtype]
    reference = Reference(checkpoint, dtype)
    artifact = load_artifact(cell)
    assert artifact.num_blocks == 3 and str(artifact.pools[0].dtype) == f"torch.{dtype}"
    prompts = _prompts(reference)
    assert len(prompts) >= 20
    got = [artifact.generate([p], NEW, eos_token_id=EOS_IDS)[0] for p in prompts]
    expected = [reference.generate(p, NEW) for p in prompts]
    mismatched = [i for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e]
    assert not mismatched, f"{len(mismatched)} of {len(prompts)} prompts differ: {mismatched}"
    assert len({tuple(e) for e in expected}) > len(prompts) // 2  # the model is not stuck on one answer


@pytest.mark.parametrize("dtype", DTYPES)
def test_run_prompt_and_chat_print_transformers_greedy_text(built, dtype, capsys) -> None:
    checkpoint, cell = built[dtype]
    reference = Reference(checkpoint, dtype)
    prompts, questions = [PROMPTS[5], PROMPTS[12]], QUESTIONS[:2]
    want = "".join(reference.text(reference.ids(p), NEW) + "\n" for p in prompts)
    assert run_output(cell, "--prompt", prompts, NEW, capsys) == want
    want = "".join(reference.text(reference.chat_ids(q), NEW) + "\n" for q in questions)
    assert run_output(cell, "--chat", questions, NEW, capsys) == want
    # --chat is the template's text, --prompt the raw text: they differ
    assert run_output(cell, "--prompt", questions[:1], NEW, capsys) != want.split("\n")[0] + "\n"


def test_chat_on_a_tokenizer_without_a_template_is_refused_pointing_to_prompt(built, tmp_path, capsys) -> None:
    from rbln_build.run import main

    checkpoint = tmp_path / "no_template"
    shutil.copytree(built["float32"][0], checkpoint)
    (checkpoint / "chat_template.jinja").unlink()
    cell = build_cell(checkpoint, tmp_path, "no_template", num_blocks=1)
    assert main([str(cell), "--chat", "hello"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no chat template" in err and "--prompt" in err, err
    assert main([str(cell), "--prompt", "hello", "--max-new-tokens", "2"]) == 0


def test_chat_and_prompt_are_alternatives(built, capsys) -> None:
    from rbln_build.run import main

    with pytest.raises(SystemExit) as info:
        main([str(built["float32"][1]), "--chat", "a", "--prompt", "b"])
    assert info.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("arch", "seed"), [("llama", 1), ("llama", 2), ("qwen3", 1), ("qwen3", 2)])
def test_sweep_of_seeds_and_families_matches_transformers(tmp_path, arch, seed, dtype) -> None:
    from rbln_build.backends.torch._runtime import load_artifact

    checkpoint = make_checkpoint(tmp_path / "ck", arch, seed=seed, dtype=dtype, near_ties=True)
    reference = Reference(checkpoint, dtype)
    artifact = load_artifact(build_cell(checkpoint, tmp_path, "ck", num_blocks=2))
    prompts = [reference.ids(p) for p in PROMPTS] + [reference.chat_ids(q) for q in QUESTIONS]
    prompts += [reference.ids(long_prompt(reference.tokenizer, n, seed=n)) for n in (1030, 1500, 1900)]
    got = [artifact.generate([p], 24, eos_token_id=EOS_IDS)[0] for p in prompts]
    expected = [reference.generate(p, 24) for p in prompts]
    assert [i for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e] == []
