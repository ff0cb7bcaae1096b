"""Quantized variants with the real optimum-rbln 0.12.0 (only ``rebel`` stood in; issue 34, "done when"):
a float checkpoint -> w8 and w4 variants made by rbln-build -> every rbln cell loads in optimum-rbln with
its quantization, optimum-rbln's own loader reads the checkpoint each variant compiled as non-zero
weights equal to the float ones within half a quantization step, and a checkpoint quantized elsewhere
(int8 + scales, optimum-rbln's format) builds with both backends."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _checkpoints import TOKENIZER_FILES, make_checkpoint
from _rbln_sdk import needs_optimum_rbln, sdk_env, sdk_on_path

pytestmark = [pytest.mark.slow, pytest.mark.integration, needs_optimum_rbln]

MATRIX = """\
models: [ck]
devices: [atom_max]
budgets: [null]
quantizations: [w8, w4]
include:
  - models: [ckq]
    quantizations: null
"""


def cli(args: list[str], cwd: Path, code: int = 0) -> str:
    env = dict(os.environ, **sdk_env())
    proc = subprocess.run(
        [sys.executable, "-m", "rbln_build.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == code, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def sdk():
    with pytest.MonkeyPatch.context() as mp:
        yield sdk_on_path(mp)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from rbln_build.quantization import Quantization
    from rbln_build.variants import write_quantized

    root = tmp_path_factory.mktemp("q") / "proj"
    cli(["init", str(root)], cwd=root.parent)
    float_ck = make_checkpoint(root / "checkpoints" / "float", "llama", seed=7)
    quantized = root / "checkpoints" / "int8"  # a checkpoint published already quantized (int8 + scales)
    quantized.mkdir()
    write_quantized(float_ck, quantized, Quantization(weights="int8"))
    for name in ("config.json", "generation_config.json", *TOKENIZER_FILES):
        shutil.copyfile(float_ck / name, quantized / name)
    cli(["recipe", "add", "ck", "--from", "checkpoints/float", "--max-seq-len", "256"], cwd=root)
    cli(["recipe", "add", "ckq", "--from", "checkpoints/int8", "--max-seq-len", "256"], cwd=root)
    (root / "conf" / "matrix" / "main.yaml").write_text(MATRIX)
    cli(["progress=false", "matrix.backend=rbln", "build_dir=build-rbln"], cwd=root)
    cli(["progress=false"], cwd=root)
    return {"root": root, "float": float_ck}


def cells(root: Path, build: str) -> dict[str, Any]:
    return json.loads((root / build / "manifest.json").read_text())["cells"]


def test_every_rbln_variant_loads_in_optimum_rbln_with_its_quantization(sdk, project) -> None:
    from optimum.rbln import RBLNAutoModelForCausalLM

    root = project["root"]
    built = cells(root, "build-rbln")
    assert sorted(built) == ["ck.atom_max.w4.bnone", "ck.atom_max.w8.bnone", "ckq.atom_max.bnone"]
    for cid, weights in (
        ("ck.atom_max.w8.bnone", "int8"),
        ("ck.atom_max.w4.bnone", "int4"),
        ("ckq.atom_max.bnone", "int8"),
    ):
        entry = built[cid]
        assert entry["status"] == "ok", entry["error"]
        cell = root / "build-rbln" / entry["artifact"]["path"]
        model = RBLNAutoModelForCausalLM.from_pretrained(str(cell), export=False, rbln_create_runtimes=False)
        assert model.rbln_config.quantization.weights == weights
        assert model.rbln_config.kvcache_num_blocks == entry["kvcache_num_blocks"]
        record = json.loads((cell / "rbln-build.json").read_text())
        assert record["quantization"]["format"]["weights"] == weights
        # an rbln cell is a compiled model of its own quantized weights: the serving record is exact
        assert entry["serving"]["precompiled"] and entry["serving"]["quantization"]["exact"] is True


def test_optimum_rbln_reads_what_each_variant_compiled_as_the_float_weights(sdk, project) -> None:
    import torch
    from optimum.rbln.transformers.utils.rbln_quantization import RBLNQuantizationConfig, get_quantized_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    root = project["root"]
    floats = load_file(str(project["float"] / "model.safetensors"))
    compiles = {e["compile_key"]: e for e in cells(root, "build-rbln").values()}
    seen = set()
    for key, entry in compiles.items():
        meta = json.loads((root / "build-rbln" / "cache" / "compile" / key / "entry.json").read_text())["meta"]
        stage = meta.get("quantized_checkpoint")
        if stage is None:
            assert entry["cell"] == "ckq.atom_max.bnone"  # quantized already: compiled as it is
            continue
        weights = stage["format"]["weights"]
        seen.add(weights)
        files = root / "build-rbln" / "cache" / "quantized" / stage["stage_key"] / "files"
        folder = root / f"load-{weights}"
        folder.mkdir()
        for f in files.iterdir():
            (folder / f.name).symlink_to(f)
        shutil.copyfile(project["float"] / "config.json", folder / "config.json")
        model = get_quantized_model(
            AutoModelForCausalLM, str(folder), rbln_quantization=RBLNQuantizationConfig(weights=weights)
        )
        layers = [(n, m) for n, m in model.named_modules() if type(m).__name__ == "QIntLinear"]
        assert len(layers) == 14
        for name, layer in layers:
            effective = layer.weight.to(torch.float32) * layer.weight_scale
            assert effective.abs().amax(dim=1).gt(0).all(), name  # no all-zero row (a stray scale gives zeros)
            assert ((effective - floats[f"{name}.weight"]).abs() <= layer.weight_scale / 2 + 1e-6).all(), name
    assert seen == {"int8", "int4"}


def test_variants_carry_quality_and_the_prequantized_checkpoint_builds_on_cpu_too(project) -> None:
    root = project["root"]
    rbln, torch_cells = cells(root, "build-rbln"), cells(root, "build")
    assert all(e["status"] == "ok" for e in torch_cells.values()), {k: e["error"] for k, e in torch_cells.items()}
    for cid in ("ck.atom_max.w8.bnone", "ck.atom_max.w4.bnone"):
        for built in (rbln, torch_cells):
            assert built[cid]["quality"]["measured"] is True
        # the rbln side de-quantizes the same checkpoint the CPU program runs: the same figures
        assert rbln[cid]["quality"]["perplexity"] == pytest.approx(torch_cells[cid]["quality"]["perplexity"], rel=1e-4)
    assert "quality" not in rbln["ckq.atom_max.bnone"]  # not a matrix variant: no float weights to compare with
