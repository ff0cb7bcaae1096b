"""Quantized variants (issue 34): optimum-rbln's formats as a matrix axis, checkpoints in its format read
and made, the torch program runs the quantized weights, quality figures and their gate, serving records.

The formats and constraints are optimum-rbln 0.12.0's (``transformers/utils/rbln_quantization.py``): the
tests that need its own code import it (the real package; only ``rebel`` is stood in elsewhere)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from _checkpoints import make_checkpoint
from _rbln_sdk import needs_optimum_rbln, sdk_on_path
from safetensors.torch import load_file, save_file

from rbln_build.errors import ConfigError, RecipeError
from rbln_build.memory import inspect_checkpoint
from rbln_build.quantization import NONE, QMAX, Quantization, dequantized, parse_variant, quantize_state
from rbln_build.variants import gate_problem, write_quantized


@pytest.fixture(scope="module")
def sdk():
    """optimum-rbln importable (it imports ``rebel`` at once; the stand-in is put on the path)."""
    with pytest.MonkeyPatch.context() as mp:
        yield sdk_on_path(mp)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("ck") / "llama", "llama", seed=7)


# ---------------------------------------------------------------- formats and the axis


@pytest.mark.parametrize(
    ("name", "weights", "activations", "kv"),
    [
        pytest.param("none", "fp16", "fp16", "fp16", id="none"),
        pytest.param("w8", "int8", "fp16", "fp16", id="w8"),
        pytest.param("w4", "int4", "fp16", "fp16", id="w4"),
        pytest.param("wfp8", "fp8", "fp16", "fp16", id="wfp8"),
        pytest.param("w8a8", "int8", "int8", "fp16", id="w8a8"),
        pytest.param("wfp8afp8", "fp8", "fp8", "fp16", id="wfp8afp8"),
        pytest.param("w8kvfp8", "int8", "fp16", "fp8", id="w8kvfp8"),
    ],
)
@needs_optimum_rbln
def test_variant_names_are_optimum_rbln_quantization_configs(sdk, name, weights, activations, kv) -> None:
    from optimum.rbln.transformers.utils.rbln_quantization import RBLNQuantizationConfig

    q = parse_variant(name, "matrix.quantizations[0]")
    assert (q.weights, q.activations, q.kv_caches, q.name) == (weights, activations, kv, name)
    if q != NONE:  # optimum-rbln's own config accepts what the name says, unchanged
        config = RBLNQuantizationConfig(**q.rbln_option())
        assert (config.weights, config.activations, config.kv_caches) == (weights, activations, kv)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("w16kvfp8", "KV cache alone", id="kv-only"),
        pytest.param("w16a8", "int8 activations with fp16 weights", id="act-only"),
        pytest.param("w8afp8", "fp8 activations with int8 weights", id="int-weights-fp8-act"),
        pytest.param("w4afp8", "fp8 activations with int4 weights", id="int4-weights-fp8-act"),
        pytest.param("wfp8a8", "int8 activations with fp8 weights", id="fp8-weights-int8-act"),
        pytest.param("w3", "is not a variant name", id="bits"),
        pytest.param("w8a16", "spells 'w8'", id="two-spellings"),
    ],
)
def test_impossible_combinations_are_refused_at_composition_one_message_each(name, message) -> None:
    from rbln_build.config._config import compose_settings

    with pytest.raises(ConfigError, match=rf"matrix.quantizations\[1\]: '{name}' .*{message}"):
        compose_settings(["matrix=plans", f"matrix.quantizations=[w8,{name}]"])


@needs_optimum_rbln
def test_the_impossible_ones_are_impossible_in_optimum_rbln_too(sdk) -> None:
    """What the refusals above say, shown on optimum-rbln's own code: the config refuses a KV cache
    alone, and a quantized linear layer with mismatched activations creates no activation scale."""
    from optimum.rbln.transformers.utils.rbln_quantization import (
        RBLNQuantizationConfig,
        convert_to_qfloat_linear,
        convert_to_qint_linear,
    )

    with pytest.raises(ValueError, match="meaningless"):
        RBLNQuantizationConfig(weights="fp16", activations="fp16", kv_caches="fp8")
    layer = torch.nn.Linear(4, 4)
    assert (
        convert_to_qint_linear(
            layer, RBLNQuantizationConfig(weights="int8", activations="fp8"), torch.float32
        ).input_scale
        is None
    )
    layer = torch.nn.Linear(4, 4)
    assert (
        convert_to_qfloat_linear(
            layer, RBLNQuantizationConfig(weights="fp8", activations="int8"), torch.float32
        ).input_scale
        is None
    )


def test_the_axis_leaves_existing_cells_alone_and_names_its_own() -> None:
    from rbln_build.config._config import compose_settings
    from rbln_build.config._matrix import expand

    plain = expand(compose_settings(["matrix=plans"]), {})
    none = expand(compose_settings(["matrix=plans", "matrix.quantizations=[none]"]), {})
    both = expand(compose_settings(["matrix=plans", "matrix.quantizations=[none,w8,w4]"]), {})
    assert all("quantization" not in c.inputs() for c in plain)
    # the none variant compiles what the plain cell compiles (one compile key), under its own id
    assert [c.compile_key for c in none] == [c.compile_key for c in plain]
    assert [c.id for c in none] == [c.id.replace(".b", ".none.b", 1) for c in plain]
    assert len(both) == 3 * len(plain) and len({c.compile_key for c in both}) == 3 * len({c.compile_key for c in plain})
    w4 = next(c for c in both if c.id == "llama3_2_1b.rebel100.w4.b0.5")
    assert w4.spec is not None and w4.spec.recipe.weight_bits == 4  # the memory model accounts its weights
    assert w4.inputs()["quantization"] == {"name": "w4", "weights": "int4", "activations": "fp16", "kv_caches": "fp16"}


# ---------------------------------------------------------------- checkpoints in optimum-rbln's format


@pytest.mark.parametrize("scale_name", ["weight_scale", "scales", "w_scale", "scale"])
def test_a_prequantized_checkpoint_is_read_under_every_scale_name_optimum_rbln_accepts(
    llama, tmp_path, scale_name
) -> None:
    out = tmp_path / "q"
    out.mkdir()
    write_quantized(llama, out, Quantization(weights="int8"))
    state = load_file(str(out / "model.safetensors"))
    renamed = {k.replace(".weight_scale", f".{scale_name}"): v for k, v in state.items()}
    save_file(renamed, str(out / "model.safetensors"))
    layout = inspect_checkpoint(out).quantized
    assert layout is not None and (layout.storage, layout.linears, layout.scale_names) == ("int8", 14, (scale_name,))


def test_one_missing_scale_in_a_quantized_checkpoint_is_named(llama, tmp_path) -> None:
    out = tmp_path / "q"
    out.mkdir()
    write_quantized(llama, out, Quantization(weights="int8"))
    state = load_file(str(out / "model.safetensors"))
    del state["model.layers.1.self_attn.v_proj.weight_scale"]
    save_file(state, str(out / "model.safetensors"))
    with pytest.raises(
        RecipeError, match=r"it lacks a scale \(.*\) for model.layers.1.self_attn.v_proj.weight_scale\."
    ):
        inspect_checkpoint(out)


@pytest.mark.parametrize("weights", ["int8", "int4", "fp8"])
def test_round_to_nearest_per_output_channel_stays_within_half_a_step(weights) -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(48, 64, generator=g) * torch.linspace(0.01, 3.0, 48)[:, None]  # rows of very different ranges
    q = quantize_state(
        {"model.layers.0.mlp.up_proj.weight": w, "model.norm.weight": torch.ones(64)}, Quantization(weights)
    )
    scale = q["model.layers.0.mlp.up_proj.weight_scale"]
    assert scale.shape == (48, 1) and torch.equal(q["model.norm.weight"], torch.ones(64))
    back = dequantized(q, torch.float32)["model.layers.0.mlp.up_proj.weight"]
    if weights == "fp8":  # e4m3 keeps 3 mantissa bits: a relative error of at most 2**-4 of the value
        assert ((back - w).abs() <= w.abs() * 2**-4 + scale * 2**-9).all()
    else:
        assert ((back - w).abs() <= scale / 2 + 1e-7).all()
        assert q["model.layers.0.mlp.up_proj.weight"].abs().max() == QMAX[weights]  # every row uses its range


@needs_optimum_rbln
def test_optimum_rbln_loader_reads_our_checkpoint_as_the_float_weights(sdk, llama, tmp_path) -> None:
    """optimum-rbln 0.12.0's own ``get_quantized_model`` (the loader its compile uses) on a checkpoint
    rbln-build made: every quantized linear is non-zero and equals the float weight within half a step."""
    from optimum.rbln.transformers.utils.rbln_quantization import RBLNQuantizationConfig, get_quantized_model
    from transformers import AutoModelForCausalLM

    floats = load_file(str(llama / "model.safetensors"))
    for weights, bits in (("int8", 8), ("int4", 4)):
        out = tmp_path / weights
        out.mkdir()
        write_quantized(llama, out, Quantization(weights=weights))
        (out / "config.json").write_bytes((llama / "config.json").read_bytes())
        model = get_quantized_model(
            AutoModelForCausalLM, str(out), rbln_quantization=RBLNQuantizationConfig(weights=weights)
        )
        layers = [(n, m) for n, m in model.named_modules() if type(m).__name__ == "QIntLinear"]
        assert len(layers) == 14
        for name, layer in layers:
            effective = layer.weight.to(torch.float32) * layer.weight_scale
            assert effective.abs().sum() > 0, name
            step = layer.weight_scale
            assert ((effective - floats[f"{name}.weight"]).abs() <= step / 2 + 1e-6).all(), name
            assert layer.weight.abs().max() <= QMAX[weights] and bits in (4, 8)


# ---------------------------------------------------------------- gate


def test_the_gate_names_the_figures_and_fails_what_it_cannot_measure() -> None:
    quality = {
        "measured": True,
        "perplexity": 11.0,
        "float_perplexity": 10.0,
        "perplexity_increase": 0.1,
        "greedy_agreement": 0.5,
        "greedy_tokens": 128,
    }
    assert gate_problem(quality, (("max_perplexity_increase", 0.1),)) is None
    problem = gate_problem(quality, (("max_perplexity_increase", 0.05), ("min_greedy_agreement", 0.9)))
    assert problem is not None
    assert "perplexity 11.0 against the float weights' 10.0 (+10.00%)" in problem
    assert "over matrix.max_perplexity_increase 5.00% and greedy agreement under matrix.min_greedy_agreement" in problem
    assert "could not be measured (no tokenizer)" in str(
        gate_problem({"measured": False, "reason": "no tokenizer"}, (("min_greedy_agreement", 0.1),))
    )


# ---------------------------------------------------------------- a build: one float recipe, every variant
# (slow: the build measures two variants on CPU, about a minute; run them by node id)


def _cli(args: list[str], cwd: Path, code: int = 0, module: str = "rbln_build.cli") -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1200
    )
    assert proc.returncode == code, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def built(llama, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("proj") / "proj"
    _cli(["init", str(root)], cwd=root.parent)
    _cli(["recipe", "add", "ck", "--from", str(llama), "--max-seq-len", "256"], cwd=root)
    (root / "conf" / "matrix" / "main.yaml").write_text(
        "models: [ck]\ndevices: [atom_max]\nbudgets: [null]\nquantizations: [none, w8, w4]\n"
    )
    out = _cli(["progress=false"], cwd=root)
    return {"root": root, "out": out, "cells": json.loads((root / "build" / "manifest.json").read_text())["cells"]}


@pytest.mark.slow
def test_one_float_recipe_yields_every_variant_with_its_quality(built) -> None:
    cells = built["cells"]
    assert sorted(cells) == ["ck.atom_max.none.bnone", "ck.atom_max.w4.bnone", "ck.atom_max.w8.bnone"]
    assert all(c["status"] == "ok" for c in cells.values()), {k: c["error"] for k, c in cells.items()}
    assert "quality" not in cells["ck.atom_max.none.bnone"]
    w8, w4 = cells["ck.atom_max.w8.bnone"]["quality"], cells["ck.atom_max.w4.bnone"]["quality"]
    for q in (w8, w4):
        assert q["measured"] and q["text_tokens"] == 2048 and q["greedy_tokens"] == 128 and q["window"] == 256
        assert q["float_perplexity"] == w8["float_perplexity"]  # the same float reference for every variant
    assert w8["perplexity"] != w8["float_perplexity"]  # the program runs the quantized weights, not the float ones
    assert w8["greedy_agreement"] > w4["greedy_agreement"]  # 4 bits is coarser than 8
    # the stage's checkpoint is in the store, once per variant, and named by its method
    stage = sorted((built["root"] / "build" / "cache" / "quantized").iterdir())
    assert len(stage) == 2
    metas = [json.loads((s / "entry.json").read_text())["meta"] for s in stage]
    assert {m["method"] for m in metas} == {"rtn-symmetric-per-output-channel/1"}
    assert {m["format"]["name"] for m in metas} == {"w8", "w4"}


@pytest.mark.slow
def test_quantized_cells_never_claim_the_float_command_is_exact(built) -> None:
    for cid, cell in built["cells"].items():
        serving = cell["serving"]
        if ".none." in cid:
            assert "quantization" not in serving
            continue
        assert serving["exact"] is False and serving["quantization"]["exact"] is False
        assert "float weights at start-up, not this cell's quantized ones" in serving["quantization"]["reason"]
        assert serving["quantization"]["reason"] in serving["notes"]


@pytest.mark.slow
def test_the_w8_program_generates_on_cpu(built) -> None:
    out = _cli(
        [str(built["root"] / "build" / "artifacts" / "ck.atom_max.w8.bnone"), "--prompt", "The river"],
        cwd=built["root"],
        module="rbln_build.run",
    )
    assert out.strip()


@pytest.mark.slow
def test_the_gate_fails_the_coarse_variant_with_its_figures(built) -> None:
    """w4 of this model agrees with the float greedy tokens far less often than w8: a gate between the
    two fails w4 alone, with the figures, and the run's exit status says a cell failed."""
    cells = built["cells"]
    w8 = cells["ck.atom_max.w8.bnone"]["quality"]["greedy_agreement"]
    w4 = cells["ck.atom_max.w4.bnone"]["quality"]["greedy_agreement"]
    limit = (w8 + w4) / 2
    out = _cli(["progress=false", f"matrix.min_greedy_agreement={limit}"], cwd=built["root"], code=1)
    gated = json.loads((built["root"] / "build" / "manifest.json").read_text())["cells"]
    assert gated["ck.atom_max.w8.bnone"]["status"] == "ok" and gated["ck.atom_max.none.bnone"]["status"] == "ok"
    failed = gated["ck.atom_max.w4.bnone"]
    assert failed["status"] == "failed" and failed["error_kind"] == "quality_gate"
    assert f"greedy agreement {w4:.2%} of 128 tokens" in failed["error"] and "min_greedy_agreement" in failed["error"]
    assert failed["quality"]["greedy_agreement"] == w4
    assert "compiled" in out and "0 compiled" in out  # the gate re-decides cells, it compiles nothing again


@pytest.mark.slow
def test_gc_collects_the_variant_entries_nothing_references_and_keeps_the_rest(built) -> None:
    """After the matrix drops w4: gc removes w4's quantized checkpoint (cache/quantized) with its compile
    entry, keeps w8's and the float side of the quality figures (cache/quality), which w8 still uses; a
    w4 cell of the composed matrix whose compile entry is gone (a build stopped after the stage) keeps
    its checkpoint too."""
    root, cache = built["root"], built["root"] / "build" / "cache"

    def stage(cid: str) -> dict[str, str]:
        compile_key = built["cells"][cid]["compile_key"]
        meta = json.loads((cache / "compile" / compile_key / "entry.json").read_text())["meta"]
        return {"quantized": meta["quantized_checkpoint"]["stage_key"], "quality": meta["quality"]["float_key"]}

    w8, w4 = stage("ck.atom_max.w8.bnone"), stage("ck.atom_max.w4.bnone")
    assert w8["quality"] == w4["quality"] and w8["quantized"] != w4["quantized"]
    _cli(["progress=false", "matrix.quantizations=[none,w8]"], cwd=root)
    kept = json.loads(_cli(["gc", "--json", "--dry-run", "matrix.quantizations=[none,w8,w4]"], cwd=root))
    # the composed matrix still has w4: its compile entry and checkpoint stay (an earlier run's records may go)
    assert {r["kind"] for r in kept["removed"]} <= {"results", "failures"}
    shutil.rmtree(cache / "compile" / built["cells"]["ck.atom_max.w4.bnone"]["compile_key"])
    kept = json.loads(_cli(["gc", "--json", "--dry-run", "matrix.quantizations=[none,w8,w4]"], cwd=root))
    assert not [r for r in kept["removed"] if r["kind"] in ("quantized", "quality")]  # by the cell's own spec
    out = json.loads(_cli(["gc", "--json", "matrix.quantizations=[none,w8]"], cwd=root))
    removed = {(r["kind"], r["path"]) for r in out["removed"]}
    assert ("quantized", f"cache/quantized/{w4['quantized']}") in removed
    assert sorted(p.name for p in (cache / "quantized").iterdir()) == [w8["quantized"]]
    assert sorted(p.name for p in (cache / "quality").iterdir()) == [w8["quality"]]
    status = _cli(["status", "matrix.quantizations=[none,w8]"], cwd=root)
    assert "would" not in status  # nothing the narrowed matrix needs was removed
