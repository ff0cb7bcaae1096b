"""Every recipe loads, names its source, and produces a report the estimator accepts on every device."""

from __future__ import annotations

import pytest
import yaml
from memory_helpers import report, resolve

from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR, list_recipes, load_recipe
from rbln_build.memory.explain import DEFAULT_DEVICE_DIR, load_device

RECIPES = list_recipes()
DEVICES = sorted(p.stem for p in DEFAULT_DEVICE_DIR.glob("*.yaml"))
BIG = ["qwen3_8b", "qwen3_0_6b", "llama3_1_8b", "llama3_2_1b", "mistral_7b_v0_1", "gemma3_1b"]


def test_the_issue_recipes_exist():
    assert set(BIG) | {"tiny_llama", "tiny_qwen3"} <= set(RECIPES)


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_loads_and_names_its_source(name):
    recipe = load_recipe(name)
    meta = yaml.safe_load((DEFAULT_RECIPES_DIR / name / "recipe.yaml").read_text())
    assert set(meta["source"]) == {"model_id", "revision"}
    assert recipe.build["batch_size"] >= 1 and recipe.build["max_seq_len"] >= 1
    if name in BIG:
        assert recipe.weights_path is None and recipe.seed is None  # no weights on this machine
        assert "/" in meta["source"]["model_id"]


@pytest.mark.parametrize("name", ["tiny_llama", "tiny_qwen3"])
def test_tiny_recipes_stay_tiny(name):
    g = load_recipe(name).geometry
    assert g.hidden_size <= 128 and g.num_layers <= 4 and load_recipe(name).seed is not None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_produces_a_report_on_every_device(name, device):
    npu, num_devices = load_device(device)
    rep = report(name, npu, num_devices)
    assert rep.kv_tensors and rep.alloc["prefill"]["weights"]
    res = resolve(name, npu, num_devices)
    # A model may not fit a device (e.g. Qwen3-8B on one ATOM); that must be the estimator's answer,
    # never a malformed report.
    assert res.ok or res.error_kind == "insufficient_memory", res.error


def test_layer_types_of_the_sliding_window_recipes():
    assert set(load_recipe("mistral_7b_v0_1").geometry.layer_types) == {"sliding_attention"}
    gemma = load_recipe("gemma3_1b").geometry
    assert gemma.sliding_window == 512 and gemma.tie_word_embeddings
    assert [i for i, t in enumerate(gemma.layer_types) if t == "full_attention"] == [5, 11, 17, 23]
