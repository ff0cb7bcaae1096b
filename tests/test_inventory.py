"""The parameter inventory: exact published totals, tied weights once, roles, cache behaviour."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest
from memory_helpers import inventory

from rbln_build.memory import _inventory as inv_mod
from rbln_build.memory._inventory import Inventory, cached_inventory, inventory_from_model
from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR, load_recipe

PUBLISHED_TOTALS = [
    pytest.param("qwen3_8b", 8_190_735_360, id="qwen3_8b"),
    pytest.param("llama3_1_8b", 8_030_261_248, id="llama3_1_8b"),
    pytest.param("qwen3_0_6b", 596_049_920, id="qwen3_0_6b"),
    pytest.param("llama3_2_1b", 1_235_814_400, id="llama3_2_1b"),
    pytest.param("mistral_7b_v0_1", 7_241_732_096, id="mistral_7b_v0_1"),
    pytest.param("gemma3_1b", 999_885_952, id="gemma3_1b"),
    pytest.param("smollm2_135m_instruct", 134_515_008, id="smollm2_135m_instruct"),
    # tiny_qwen3 by hand: embed 384*96 + 3 * (q 128*96 + k,v 2*64*96 + o 96*128 + q/k norms 2*32
    #                     + mlp 3*96*192 + 2 norms 2*96) + final norm 96
    pytest.param("tiny_qwen3", 384 * 96 + 3 * (12288 + 12288 + 12288 + 64 + 55296 + 192) + 96, id="tiny_qwen3"),
]


@pytest.mark.parametrize("name, total", PUBLISHED_TOTALS)
def test_parameter_count_equals_published_total(name, total):
    assert inventory(name).total_parameters == total


@pytest.mark.parametrize("name", ["qwen3_0_6b", "llama3_2_1b", "gemma3_1b", "tiny_qwen3", "smollm2_135m_instruct"])
def test_tied_embeddings_are_counted_once(name):
    inv = inventory(name)
    assert inv.tied == {"lm_head.weight": "model.embed_tokens.weight"}
    assert inv.lm_head_tied
    assert [t.name for t in inv.by_role("embedding")] == ["model.embed_tokens.weight"]
    assert inv.by_role("lm_head") == []
    g = load_recipe(name).geometry
    assert sum(t.numel for t in inv.by_role("embedding")) == g.vocab_size * g.hidden_size


def test_qwen3_0_6b_total_is_the_untied_count_minus_one_embedding():
    # Hand count: 28 layers of 15,730,944 + the embedding once + the final norm.
    assert inventory("qwen3_0_6b").total_parameters == 28 * 15_730_944 + 151_936 * 1024 + 1024


def test_roles_and_layers_of_qwen3_8b():
    inv = inventory("qwen3_8b")
    roles = {r: len(inv.by_role(r)) for r in ("embedding", "lm_head", "linear", "norm", "other")}
    # 7 projections per layer; 4 norms per layer (input, post-attention, q_norm, k_norm) + the final one
    assert roles == {"embedding": 1, "lm_head": 1, "linear": 7 * 36, "norm": 4 * 36 + 1, "other": 0}
    assert {t.layer for t in inv.tensors if t.layer is not None} == set(range(36))
    assert [t.layer for t in inv.tensors if t.layer is None] and all(
        t.role in ("embedding", "lm_head", "norm") for t in inv.tensors if t.layer is None
    )
    q = next(t for t in inv.tensors if t.name == "model.layers.0.self_attn.q_proj.weight")
    assert (q.shape, q.dtype, q.role, q.layer) == ((4096, 4096), "bfloat16", "linear", 0)


def test_gemma3_layer_types_agree_with_transformers():
    from transformers import Gemma3TextConfig

    c = json.loads((DEFAULT_RECIPES_DIR / "gemma3_1b" / "config.json").read_text())
    hf = Gemma3TextConfig(**{k: v for k, v in c.items() if k != "model_type"})
    assert list(load_recipe("gemma3_1b").geometry.layer_types) == list(hf.layer_types)
    assert list(hf.layer_types).count("full_attention") == 4


def test_cache_hit_does_not_rebuild_and_json_round_trips(tmp_path, monkeypatch):
    data = (DEFAULT_RECIPES_DIR / "tiny_llama" / "config.json").read_bytes()
    first = cached_inventory(data, tmp_path)
    files = list(tmp_path.iterdir())
    assert [f.suffix for f in files] == [".json"] and len(files[0].stem) == 64

    def boom(*_a, **_k):
        raise AssertionError("a cache hit must not build the model")

    monkeypatch.setattr(inv_mod, "inventory_from_config", boom)
    assert cached_inventory(data, tmp_path) == first
    assert Inventory.from_json(first.to_json()) == first


TINY_LLAMA = DEFAULT_RECIPES_DIR / "tiny_llama" / "config.json"


@pytest.fixture
def builds(monkeypatch):
    """Counts the inventories actually built (cache misses)."""
    calls = []
    real = inv_mod.inventory_from_config

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(inv_mod, "inventory_from_config", counting)
    return calls


def test_same_inputs_hit_and_have_a_stable_key(tmp_path, builds):
    data = TINY_LLAMA.read_bytes()
    first = cached_inventory(data, tmp_path)
    assert cached_inventory(data, tmp_path) == first and len(builds) == 1
    assert [f.name for f in tmp_path.iterdir()] == [f"{inv_mod.cache_key(data)}.json"]
    entry = json.loads(next(tmp_path.iterdir()).read_text())
    assert entry["built_with"]["transformers"] == importlib.metadata.version("transformers")
    assert entry["built_with"]["torch"] == importlib.metadata.version("torch")


@pytest.mark.parametrize("package", ["transformers", "torch"])
def test_another_package_version_misses(tmp_path, monkeypatch, builds, package):
    data = TINY_LLAMA.read_bytes()
    first = cached_inventory(data, tmp_path)
    real = inv_mod._package_version
    monkeypatch.setattr(inv_mod, "_package_version", lambda name: "0.0.1" if name == package else real(name))
    assert cached_inventory(data, tmp_path) == first
    assert len(builds) == 2 and len(list(tmp_path.iterdir())) == 2  # rebuilt, under another name
    assert cached_inventory(data, tmp_path) == first and len(builds) == 2  # and then a hit


def test_another_inventory_code_misses(tmp_path, monkeypatch, builds):
    data = TINY_LLAMA.read_bytes()
    cached_inventory(data, tmp_path)
    monkeypatch.setattr(inv_mod, "_inventory_code", lambda: "edited")
    cached_inventory(data, tmp_path)
    assert len(builds) == 2


@pytest.mark.integration
def test_key_covers_the_versions_and_the_code_without_importing_them():
    code = (
        "import sys, rbln_build.memory._inventory as m; k = m.cache_key(b'{}'); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules; "
        "m._package_version = lambda name: 'other'; assert m.cache_key(b'{}') != k"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


CORRUPTIONS = [
    pytest.param(b"{not json", id="not-json"),
    pytest.param(b"", id="empty"),
    pytest.param(b"\xff\xfe\x00garbage", id="not-utf8"),
    pytest.param(b"[1, 2]", id="a-list"),
    pytest.param(b"[" * 100_000, id="deep-nesting"),
    pytest.param(lambda e: e[: len(e) // 2], id="truncated"),
    pytest.param(lambda e: e.replace(b'"tied": {', b'"tied": [], "x": {'), id="tied-not-a-dict"),
    pytest.param(lambda e: e.replace(b'"shape": [', b'"shape": 7, "y": [', 1), id="shape-not-a-list"),
    pytest.param(lambda e: e.replace(b'"role": "', b'"role": "x', 1), id="unknown-role"),
    pytest.param(lambda e: e.replace(b'"total_parameters": ', b'"total_parameters": 1', 1), id="wrong-total"),
    pytest.param(lambda e: e.replace(b'"cache_key": "', b'"cache_key": "0', 1), id="another-key"),
    pytest.param(lambda e: e.replace(b'"tensors": [', b'"tensors": [7, ', 1), id="tensor-not-an-object"),
]


@pytest.mark.parametrize("corrupt", CORRUPTIONS)
def test_corrupt_cache_entry_is_a_miss_and_is_rewritten(tmp_path, builds, corrupt):
    data = TINY_LLAMA.read_bytes()
    first = cached_inventory(data, tmp_path)
    entry = next(tmp_path.iterdir())
    good = entry.read_bytes()
    entry.write_bytes(corrupt(good) if callable(corrupt) else corrupt)
    assert entry.read_bytes() != good
    assert cached_inventory(data, tmp_path) == first
    assert len(builds) == 2  # rebuilt, not used
    assert entry.read_bytes() == good  # and rewritten
    assert cached_inventory(data, tmp_path) == first and len(builds) == 2


def test_cache_dir_defaults_to_env(tmp_path, monkeypatch):
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path))
    assert inv_mod.default_cache_dir() == tmp_path / "inventory"


def test_inventory_of_a_real_model_equals_the_meta_inventory():
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    c = json.loads((DEFAULT_RECIPES_DIR / "tiny_llama" / "config.json").read_text())
    config = LlamaConfig(**{k: v for k, v in c.items() if k != "model_type"})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    assert inventory_from_model(model).tensors == inventory("tiny_llama").tensors


@pytest.mark.integration
def test_modules_import_without_torch():
    code = (
        "import sys, rbln_build.memory._model, rbln_build.memory._inventory, rbln_build.memory._recipes, rbln_build.memory.explain; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
