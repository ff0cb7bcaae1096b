"""Local checkpoints without torch: headers checked (complete, shards present, shapes match the
config), a stat-keyed weights digest, `rbln-build recipe add`; errors name the file."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from rbln_build.errors import ConfigError, RecipeError
from rbln_build.memory import _checkpoint
from rbln_build.memory._checkpoint import INDEX_FILE, inspect_checkpoint, weights_digest
from rbln_build.memory._recipes import load_recipe
from rbln_build.scaffold._recipe import add_recipe

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 16,
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "tie_word_embeddings": True,
}
SIZES = {"F32": 4, "F16": 2, "BF16": 2}


def safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A valid safetensors file of zeros (the format: u64 header length, JSON header, data)."""
    header: dict[str, object] = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = SIZES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def checkpoint(root: Path, dtype: str = "F32", sharded: bool = False, vocab: int = 16) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(CONFIG))
    tensors = {"model.embed_tokens.weight": (dtype, [vocab, 8]), "model.norm.weight": (dtype, [8])}
    layers = {f"model.layers.{i}.mlp.up_proj.weight": (dtype, [16, 8]) for i in range(2)}
    if not sharded:
        safetensors(root / "model.safetensors", {**tensors, **layers})
        return root
    safetensors(root / "model-00001-of-00002.safetensors", tensors)
    safetensors(root / "model-00002-of-00002.safetensors", layers)
    weight_map = {n: "model-00001-of-00002.safetensors" for n in tensors} | {
        n: "model-00002-of-00002.safetensors" for n in layers
    }
    (root / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return root


@pytest.mark.parametrize(("dtype", "recipe_dtype"), [("BF16", "bfloat16"), ("F16", "float16"), ("F32", "float32")])
def test_dtype_and_shards(tmp_path: Path, dtype: str, recipe_dtype: str) -> None:
    ck = inspect_checkpoint(checkpoint(tmp_path / "ck", dtype, sharded=True), CONFIG)
    assert ck.dtype == recipe_dtype
    assert [f.name for f in ck.files] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        INDEX_FILE,
    ]


def test_a_missing_shard_is_named(tmp_path: Path) -> None:
    root = checkpoint(tmp_path / "ck", sharded=True)
    (root / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(
        RecipeError, match=r"model-00002-of-00002.safetensors: listed in model.safetensors.index.json but missing"
    ):
        inspect_checkpoint(root, CONFIG)


def test_a_partial_file_is_named(tmp_path: Path) -> None:
    root = checkpoint(tmp_path / "ck")
    f = root / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-10])
    with pytest.raises(
        RecipeError,
        match=r"model.safetensors: the header describes \d+ bytes but the file has \d+; the file is partial",
    ):
        inspect_checkpoint(root, CONFIG)


def test_a_mismatched_config_is_named(tmp_path: Path) -> None:
    root = checkpoint(tmp_path / "ck", vocab=32)
    with pytest.raises(
        RecipeError, match=r"model.safetensors: model.embed_tokens.weight has shape \[32, 8\] but config.json says"
    ):
        inspect_checkpoint(root, CONFIG)
    with pytest.raises(RecipeError, match="the checkpoint has 2 layers but config.json says num_hidden_layers = 3"):
        inspect_checkpoint(checkpoint(tmp_path / "ck2"), {**CONFIG, "num_hidden_layers": 3})


def test_no_weights_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "ck").mkdir()
    with pytest.raises(RecipeError, match=r"no \*.safetensors files"):
        inspect_checkpoint(tmp_path / "ck")


def test_digest_follows_content_and_skips_rehash_when_stat_is_unchanged(tmp_path: Path, monkeypatch) -> None:
    root = checkpoint(tmp_path / "ck", sharded=True)
    cache = tmp_path / "cache"
    first = weights_digest(inspect_checkpoint(root), cache)
    hashed: list[str] = []
    real = _checkpoint.sha256_file
    monkeypatch.setattr(_checkpoint, "sha256_file", lambda p: hashed.append(p.name) or real(p))
    _checkpoint._memory_cache.clear()  # a new process: only the on-disk cache is left
    assert weights_digest(inspect_checkpoint(root), cache) == first and hashed == []
    shard = root / "model-00002-of-00002.safetensors"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1  # one byte of one weight
    shard.write_bytes(bytes(data))
    assert weights_digest(inspect_checkpoint(root), cache) != first
    assert hashed == ["model-00002-of-00002.safetensors"]  # only the changed file is read again


def test_recipe_add_writes_a_loadable_recipe_and_never_overwrites(tmp_path: Path) -> None:
    ck = checkpoint(tmp_path / "proj" / "checkpoints" / "tiny", "BF16", sharded=True)
    recipes, conf = tmp_path / "proj" / "recipes", tmp_path / "proj" / "conf"
    written = add_recipe("tiny", ck, recipes, conf)
    assert [p.relative_to(tmp_path / "proj").as_posix() for p in written] == [
        "recipes/tiny/config.json",
        "recipes/tiny/recipe.yaml",
        "conf/model/tiny.yaml",
    ]
    assert (recipes / "tiny" / "config.json").read_bytes() == (ck / "config.json").read_bytes()
    assert "path: ../../checkpoints/tiny" in (recipes / "tiny" / "recipe.yaml").read_text()  # inside the project
    recipe = load_recipe("tiny", recipes)
    assert (recipe.dtype, recipe.weights_path, recipe.build) == (
        "bfloat16",
        ck.resolve(),
        {"batch_size": 1, "max_seq_len": 128},
    )
    assert recipe.weights_hash is not None and recipe.weights_hash.startswith("sha256:")
    with pytest.raises(ConfigError, match="never overwrites"):
        add_recipe("tiny", ck, recipes, conf)
    with pytest.raises(RecipeError, match=r"config.json: missing"):
        add_recipe("other", tmp_path, recipes, conf)
