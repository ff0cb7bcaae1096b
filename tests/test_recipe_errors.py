"""A broken recipe is a RecipeError naming the file and the fix, never a traceback."""

import shutil
from pathlib import Path

import pytest

from rbln_build.errors import RecipeError
from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR, load_recipe


@pytest.fixture
def root(tmp_path: Path) -> Path:
    shutil.copytree(DEFAULT_RECIPES_DIR / "tiny_llama", tmp_path / "tiny_llama")
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_content_hash_changes_with_either_file(root):
    before = load_recipe("tiny_llama", root).content_hash
    _edit(root / "tiny_llama" / "config.json", '"num_hidden_layers": 2', '"num_hidden_layers": 3')
    after_config = load_recipe("tiny_llama", root).content_hash
    _edit(root / "tiny_llama" / "recipe.yaml", "seed: 1234", "seed: 1235")
    after_recipe = load_recipe("tiny_llama", root).content_hash
    assert len({before, after_config, after_recipe}) == 3


@pytest.mark.parametrize(
    "file, old, new, expected",
    [
        pytest.param("recipe.yaml", "dtype: float32", "dtype: fp8", "dtype 'fp8' is not one of", id="dtype"),
        pytest.param("recipe.yaml", "weight_bits: 16", "weight_bits: 3", "quantization.weight_bits is 3", id="bits"),
        pytest.param("recipe.yaml", "seed: 1234", "seed: one", "weights.seed must be an integer", id="seed"),
        pytest.param("recipe.yaml", "name: tiny_llama", "name: other", "name is 'other' but the folder", id="name"),
        pytest.param("recipe.yaml", "family: llama", "famly: llama", "unknown field(s) famly", id="typo"),
        pytest.param("recipe.yaml", "family: llama", "family: [llama", "not valid YAML", id="yaml"),
        pytest.param("config.json", '"vocab_size": 512', '"vocab_size": 512,', "not valid JSON", id="json"),
        pytest.param("config.json", '"intermediate_size": 256,', "", "missing 'intermediate_size'", id="missing"),
    ],
)
def test_broken_recipe_names_file_and_problem(root, file, old, new, expected):
    _edit(root / "tiny_llama" / file, old, new)
    with pytest.raises(RecipeError) as info:
        load_recipe("tiny_llama", root)
    assert expected in str(info.value)
    assert str(root / "tiny_llama" / file) in str(info.value)


def test_unknown_recipe_lists_known_ones(root):
    with pytest.raises(RecipeError, match=r"recipe 'nope': .* does not exist\. Known recipes: tiny_llama\."):
        load_recipe("nope", root)
