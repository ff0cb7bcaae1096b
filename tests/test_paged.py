"""The paged-KV wrapper computes exactly HF's tokens: small blocks, scattered block tables,
chunked prefill, GQA, q/k norms, sliding-window layers; one export serves every pool size."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rbln_build.backends.torch import _paged as paged  # noqa: E402
from rbln_build.backends.torch._weights import build_model  # noqa: E402
from rbln_build.memory._recipes import load_recipe  # noqa: E402

PROMPTS = [[5, 6, 7, 8, 9], [100, 3, 200, 9, 11, 12, 13, 14, 15, 16, 17]]


def hf_greedy(model, prompt: list[int], new: int) -> list[int]:
    """transformers' own greedy generate, one unpadded prompt at a time."""
    out = model.generate(torch.tensor([prompt]), max_new_tokens=new, do_sample=False, eos_token_id=None)
    return out[0, len(prompt) :].tolist()


def paged_greedy(fn, prompts, new, *, block_size, num_blocks, chunk, pools, order=None) -> list[list[int]]:
    """Drive a paged program by hand: prefill per prompt in chunks, then batched decode (what the
    program allows beyond the runtime's one-sequence-at-a-time calls).

    Physical blocks are handed out from ``order`` (default: the pool reversed), so logical
    and physical block numbers differ and the tables are scattered.
    """
    free = list(order if order is not None else reversed(range(num_blocks)))
    tables: list[list[int]] = [[] for _ in prompts]

    def ensure(row: int, pos: int) -> None:
        while len(tables[row]) <= pos // block_size:
            tables[row].append(free.pop(0))

    def table(rows):
        w = max(len(tables[r]) for r in rows)
        return torch.tensor([tables[r] + [tables[r][0]] * (w - len(tables[r])) for r in rows])

    out: list[list[int]] = []
    with torch.no_grad():
        for row, p in enumerate(prompts):
            for s in range(0, len(p), chunk):
                ids = p[s : s + chunk]
                ensure(row, s + len(ids) - 1)
                end = s + len(ids)
                logits = fn(torch.tensor([ids]), torch.arange(s, end)[None], table([row]), torch.arange(end), *pools)
            out.append([int(logits.argmax(-1)[0])])
        lengths = [len(p) for p in prompts]
        rows = list(range(len(prompts)))
        for _ in range(new - 1):
            for r in rows:
                ensure(r, lengths[r])
            logits = fn(
                torch.tensor([[out[r][-1]] for r in rows]),
                torch.tensor([[lengths[r]] for r in rows]),
                table(rows),
                torch.arange(max(lengths) + 1),  # the longest row's keys; shorter rows mask the rest
                *pools,
            )
            for r in rows:
                lengths[r] += 1
                out[r].append(int(logits[r].argmax()))
    return out


@pytest.mark.parametrize("name", ["tiny_llama", "tiny_qwen3"])
def test_eager_wrapper_matches_hf_with_small_scattered_blocks(name: str) -> None:
    recipe = load_recipe(name)
    reference = build_model(recipe)
    wrapper = paged.PagedCausalLM(build_model(recipe), block_size=4)
    pools = paged.empty_pools(wrapper, 16)
    got = paged_greedy(wrapper, PROMPTS, 16, block_size=4, num_blocks=16, chunk=3, pools=pools)
    assert got == [hf_greedy(reference, p, 16) for p in PROMPTS]


def _sliding_recipe(tmp_path):
    import json
    import shutil

    from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR

    d = tmp_path / "recipes" / "tiny_qwen3_sliding"
    d.mkdir(parents=True)
    cfg = json.loads((DEFAULT_RECIPES_DIR / "tiny_qwen3" / "config.json").read_text())
    cfg.update(
        use_sliding_window=True,
        sliding_window=6,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    )
    (d / "config.json").write_text(json.dumps(cfg))
    shutil.copyfile(DEFAULT_RECIPES_DIR / "tiny_qwen3" / "recipe.yaml", d / "recipe.yaml")
    text = (d / "recipe.yaml").read_text().replace("name: tiny_qwen3", "name: tiny_qwen3_sliding")
    (d / "recipe.yaml").write_text(text)
    return load_recipe("tiny_qwen3_sliding", root=tmp_path / "recipes")


def test_sliding_window_layers_get_their_own_mask(tmp_path) -> None:
    recipe = _sliding_recipe(tmp_path)
    reference = build_model(recipe)
    wrapper = paged.PagedCausalLM(build_model(recipe), block_size=4)
    assert wrapper.sliding_window == 6
    pools = paged.empty_pools(wrapper, 16)
    got = paged_greedy(wrapper, PROMPTS, 16, block_size=4, num_blocks=16, chunk=4, pools=pools)
    expected = [hf_greedy(reference, p, 16) for p in PROMPTS]
    assert got == expected
    # The window matters: the same weights with the window ignored compute other tokens.
    wrapper.sliding_window = None
    wrapper.layer_types = ("full_attention",) * 3
    pools = paged.empty_pools(wrapper, 16)
    assert paged_greedy(wrapper, PROMPTS, 16, block_size=4, num_blocks=16, chunk=4, pools=pools) != expected


@pytest.fixture(scope="module")
def llama_export():
    recipe = load_recipe("tiny_llama")
    wrapper = paged.PagedCausalLM(build_model(recipe), block_size=4)
    before = paged.export_count()
    program = paged.export_paged(wrapper, max_batch=2, max_tokens=8, max_table_blocks=8, max_num_blocks=32)
    assert paged.export_count() == before + 1
    expected = [hf_greedy(build_model(recipe), p, 16) for p in PROMPTS]
    return wrapper, program.module(), expected


@pytest.mark.parametrize("num_blocks", [12, 13, 32])
def test_one_export_serves_every_pool_size(llama_export, num_blocks: int) -> None:
    # The two prompts write 5+15 and 11+15 positions: 5 + 7 = 12 blocks of 4 tokens, so a pool
    # of 12 is exactly full. The same exported program runs on pools of 12, 13 and 32 blocks.
    wrapper, program, expected = llama_export
    pools = paged.empty_pools(wrapper, num_blocks)
    got = paged_greedy(program, PROMPTS, 16, block_size=4, num_blocks=num_blocks, chunk=8, pools=pools)
    assert got == expected
    assert all(p.shape[0] == num_blocks for p in pools)


def _variant(tmp_path, name: str, cfg: dict):
    import json

    d = tmp_path / "recipes" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "recipe.yaml").write_text(f"name: {name}\nweights: {{seed: 7}}\ndtype: float32\n")
    return load_recipe(name, root=tmp_path / "recipes")


_SMALL = dict(
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    num_hidden_layers=2,
    vocab_size=256,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
)


@pytest.mark.parametrize(
    "cfg",
    [
        pytest.param(
            dict(_SMALL, model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=6),
            id="mistral_window_all_layers",
        ),
        pytest.param(
            dict(_SMALL, model_type="qwen2", architectures=["Qwen2ForCausalLM"], use_sliding_window=False),
            id="qwen2_bias",
        ),
    ],
)
def test_other_supported_families_match_hf(tmp_path, cfg) -> None:
    recipe = _variant(tmp_path, cfg["model_type"] + "_small", cfg)
    reference = build_model(recipe)
    wrapper = paged.PagedCausalLM(build_model(recipe), block_size=4)
    if cfg["model_type"] == "mistral":
        assert set(wrapper.layer_types) == {"sliding_attention"} and wrapper.sliding_window == 6
    pools = paged.empty_pools(wrapper, 16)
    got = paged_greedy(wrapper, PROMPTS, 12, block_size=4, num_blocks=16, chunk=4, pools=pools)
    assert got == [hf_greedy(reference, p, 12) for p in PROMPTS]


def test_unsupported_family_is_a_clear_build_error(tmp_path) -> None:
    from rbln_build.errors import BuildError

    cfg = dict(_SMALL, model_type="gemma", architectures=["GemmaForCausalLM"])
    model = build_model(_variant(tmp_path, "gemma_small", cfg))
    with pytest.raises(BuildError, match="supports llama, mistral, qwen2, qwen3"):
        paged.PagedCausalLM(model, block_size=4)
