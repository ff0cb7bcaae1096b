"""Seeded weights are reproducible byte for byte; checkpoints load from safetensors."""

from __future__ import annotations

import hashlib
import shutil

import pytest

torch = pytest.importorskip("torch")

from rbln_build.backends.torch._weights import build_model, param_seed, seeded_state_dict  # noqa: E402
from rbln_build.errors import RecipeError  # noqa: E402
from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR, load_recipe  # noqa: E402


def _digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def test_param_seed_is_a_fixed_function_of_seed_and_name() -> None:
    # Golden value: sha256("1234:model.embed_tokens.weight")[:8] little-endian, top bit cleared.
    digest = hashlib.sha256(b"1234:model.embed_tokens.weight").digest()
    assert param_seed(1234, "model.embed_tokens.weight") == int.from_bytes(digest[:8], "little") & (2**63 - 1)
    assert param_seed(1234, "a") != param_seed(1235, "a")


@pytest.mark.parametrize("name", ["tiny_llama", "tiny_qwen3"])
def test_same_seed_same_bytes(name: str) -> None:
    recipe = load_recipe(name)
    assert _digest(build_model(recipe)) == _digest(build_model(recipe))


def test_golden_values_pin_the_generator() -> None:
    # The first values of one tensor; a change in torch's CPU generator or our init shows up here.
    model = build_model(load_recipe("tiny_llama"))
    first = model.model.layers[0].input_layernorm.weight[:3].tolist()
    g = torch.Generator().manual_seed(param_seed(1234, "model.layers.0.input_layernorm.weight"))
    expected = (1.0 + 0.1 * torch.randn(128, generator=g))[:3].tolist()
    assert first == expected


def test_other_seed_other_weights_and_params_are_independent() -> None:
    model = build_model(load_recipe("tiny_llama"))
    a = seeded_state_dict(model, 1)
    b = seeded_state_dict(model, 2)
    assert not torch.equal(a["model.norm.weight"], b["model.norm.weight"])
    # Adding or removing a parameter never changes another one: each has its own generator.
    assert torch.equal(seeded_state_dict(model, 1)["lm_head.weight"], a["lm_head.weight"])


def test_tied_embeddings_are_one_tensor_set_once() -> None:
    model = build_model(load_recipe("tiny_qwen3"))
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert "lm_head.weight" not in seeded_state_dict(model, 4321)


def test_weights_path_loads_safetensors(tmp_path) -> None:
    from safetensors.torch import save_file

    seeded = build_model(load_recipe("tiny_qwen3"))
    ckpt = tmp_path / "recipes" / "my_qwen3" / "ckpt"
    ckpt.mkdir(parents=True)
    state = {k: v.contiguous() for k, v in seeded.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(ckpt / "model.safetensors"))
    shutil.copyfile(DEFAULT_RECIPES_DIR / "tiny_qwen3" / "config.json", ckpt.parent / "config.json")
    (ckpt.parent / "recipe.yaml").write_text("name: my_qwen3\nweights: {path: ckpt}\ndtype: float32\n")
    loaded = build_model(load_recipe("my_qwen3", root=tmp_path / "recipes"))
    assert _digest(loaded) == _digest(seeded)


def test_empty_checkpoint_is_a_recipe_error(tmp_path) -> None:
    ckpt = tmp_path / "recipes" / "empty" / "ckpt"
    ckpt.mkdir(parents=True)
    shutil.copyfile(DEFAULT_RECIPES_DIR / "tiny_llama" / "config.json", ckpt.parent / "config.json")
    (ckpt.parent / "recipe.yaml").write_text("name: empty\nweights: {path: ckpt}\ndtype: float32\n")
    with pytest.raises(RecipeError, match="no \\*.safetensors"):
        build_model(load_recipe("empty", root=tmp_path / "recipes"))


def test_recipe_without_weights_cannot_build_a_model(tmp_path) -> None:
    d = tmp_path / "recipes" / "noweights"
    d.mkdir(parents=True)
    shutil.copyfile(DEFAULT_RECIPES_DIR / "tiny_llama" / "config.json", d / "config.json")
    (d / "recipe.yaml").write_text("name: noweights\nweights: null\n")
    with pytest.raises(RecipeError, match="only a plan"):
        build_model(load_recipe("noweights", root=tmp_path / "recipes"))
