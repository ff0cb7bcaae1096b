"""End to end: ``rbln-build matrix.backend=rbln`` on the real optimum-rbln 0.12.0 (the compiler stood in by
tests/fakes/rebel), checked cell by cell through optimum-rbln's own code.

Model names come from conf/model/, so each scenario is a recipes_dir overlay under a shipped tiny name:

* tiny_llama from a local checkpoint without config.json (flash attention) and tiny_qwen3 with eager
  attention, each auto (100% of the target) and with an explicit 6 blocks: every built cell loads with
  ``RBLNAutoModelForCausalLM.from_pretrained(cell, export=False, rbln_create_runtimes=False)``, the real
  CLI's ``--get-kvcache-num-blocks`` prints the manifest's count, and its files are byte-identical to the
  real CLI's ``--set-kvcache-num-blocks`` of that count on the same baseline (the compile entry in the
  cache); the eager cell with 6 blocks fails as declared in ``matrix.expect_failure``;
* a model too big for an ATOM-Max fails its compile as declared (``insufficient_memory``), and a second
  run compiles nothing: the failure is stored, not retried.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from _rbln_sdk import TOO_BIG_BUILD, TOO_BIG_CONFIG, make_recipe, needs_optimum_rbln, sdk_env, sdk_on_path

pytestmark = [pytest.mark.slow, needs_optimum_rbln]


def _recipes(root: Path, overlay: dict[str, Callable[[Path], None]]) -> Path:
    """A recipes_dir whose folders override the shipped recipes of the same name. (Model names come
    from conf/model/, so the scenarios take the names of the shipped tiny models.)"""
    recipes = root / "recipes"
    recipes.mkdir(parents=True)
    for make in overlay.values():
        make(recipes)
    return recipes


def _local_tiny_llama(root: Path) -> Callable[[Path], None]:
    """tiny_llama from a local checkpoint folder that holds only model.safetensors (no config.json)."""
    from rbln_build.backends.torch._weights import build_model
    from rbln_build.memory._recipes import load_recipe

    checkpoint = root / "checkpoint"
    build_model(load_recipe("tiny_llama")).save_pretrained(str(checkpoint))
    for extra in ("config.json", "generation_config.json"):
        (checkpoint / extra).unlink(missing_ok=True)
    return lambda recipes: make_recipe(recipes, "tiny_llama", "tiny_llama", weights={"path": str(checkpoint)}) and None


def _build(root: Path, recipes: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rbln_build.cli",
            "matrix=tiny",
            "matrix.backend=rbln",
            "matrix.devices=[atom_max]",
            "matrix.budgets=[null]",
            "matrix.kvcache_num_blocks=[0,6]",
            f"recipes_dir={recipes}",
            f"build_dir={root / 'build'}",
            *overrides,
        ],
        cwd=root,
        env=dict(os.environ, **sdk_env()),
        capture_output=True,
        text=True,
        timeout=1200,
    )


def test_an_rbln_matrix_builds_cells_that_optimum_rbln_loads_and_its_cli_agrees_with(tmp_path, capsys) -> None:
    # tiny_llama: flash attention, weights from a local checkpoint without config.json;
    # tiny_qwen3: eager attention (optimum-rbln compiles the full pool, fixed).
    recipes = _recipes(
        tmp_path,
        {
            "tiny_llama": _local_tiny_llama(tmp_path),
            "tiny_qwen3": lambda r: make_recipe(
                r, "tiny_qwen3", "tiny_qwen3", build={"attn_impl": "eager", "kvcache_partition_len": None}
            ),
        },
    )
    first = _build(
        tmp_path,
        recipes,
        "matrix.models=[tiny_llama,tiny_qwen3]",
        "matrix.expect_failure=[{cell: tiny_qwen3.atom_max.bnone.n6, kind: kv_cache_not_resizable}]",
    )
    assert first.returncode == 0, first.stdout + first.stderr
    build = tmp_path / "build"
    manifest = json.loads((build / "manifest.json").read_text())["cells"]
    status = {cid: (e["status"], e["error_kind"], e["kvcache_num_blocks"]) for cid, e in manifest.items()}
    assert status == {
        "tiny_llama.atom_max.bnone": ("ok", None, 8),
        "tiny_llama.atom_max.bnone.n6": ("ok", None, 6),
        "tiny_qwen3.atom_max.bnone": ("ok", None, 2),
        "tiny_qwen3.atom_max.bnone.n6": ("expected_failure", "kv_cache_not_resizable", 6),  # the count asked for
    }

    with pytest.MonkeyPatch.context() as mp:
        sdk_on_path(mp)
        from optimum.rbln import RBLNAutoModelForCausalLM
        from optimum.rbln.cli import _handle_kvcache_num_blocks  # the real CLI's handler

        for cid, entry in manifest.items():
            if entry["status"] != "ok":
                continue
            cell = build / entry["artifact"]["path"]
            n = entry["kvcache_num_blocks"]
            model = RBLNAutoModelForCausalLM.from_pretrained(str(cell), export=False, rbln_create_runtimes=False)
            assert model.rbln_config.kvcache_num_blocks == n, cid
            capsys.readouterr()
            _handle_kvcache_num_blocks(str(cell), get=True, set_value=None)
            assert capsys.readouterr().out.strip() == str(n), cid
            baseline = build / "cache" / "compile" / entry["compile_key"] / "files"
            cli = tmp_path / "cli" / cid
            _handle_kvcache_num_blocks(str(baseline), get=False, set_value=n, output_dir=str(cli))
            capsys.readouterr()
            for f in sorted(cell.iterdir()):
                if f.name == "rbln_config.json":
                    # the one difference: rbln-build keeps the compiled npu/num_devices in _compile_cfgs,
                    # which the CLI's round trip writes as null (tests/test_backend_rbln.py)
                    ours, theirs = json.loads(f.read_bytes()), json.loads((cli / f.name).read_bytes())
                    for cfg in (*ours["_compile_cfgs"], *theirs["_compile_cfgs"]):
                        cfg.pop("npu"), cfg.pop("num_devices")
                    assert ours == theirs, cid
                elif f.name != "rbln-build.json":
                    assert f.read_bytes() == (cli / f.name).read_bytes(), f"{cid}: {f.name}"
            record = json.loads((cell / "rbln-build.json").read_text())
            assert (record["artifact"], record["npu"], record["kvcache_num_blocks"]) == ("rbln", "RBLN-CA25", n)

    # The real CLI as a user runs it, on one cell.
    cell = build / manifest["tiny_llama.atom_max.bnone.n6"]["artifact"]["path"]
    proc = subprocess.run(
        [sys.executable, "-m", "optimum.rbln.cli", "--model-id", str(cell), "--get-kvcache-num-blocks"],
        env=dict(os.environ, **sdk_env()),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "6", proc.stderr


def test_a_model_too_big_for_its_target_is_an_expected_failure_and_is_not_recompiled(tmp_path) -> None:
    recipes = _recipes(
        tmp_path,
        {
            "tiny_llama": lambda r: make_recipe(
                r, "tiny_llama", "tiny_llama", config=TOO_BIG_CONFIG, build=TOO_BIG_BUILD, dtype="bfloat16"
            )
        },
    )
    args = (
        "matrix.models=[tiny_llama]",
        "matrix.kvcache_num_blocks=[0]",
        "matrix.expect_failure=[{cell: tiny_llama.atom_max.bnone, kind: insufficient_memory}]",
    )
    first = _build(tmp_path, recipes, *args)
    assert first.returncode == 0, first.stdout + first.stderr
    build = tmp_path / "build"
    manifest = json.loads((build / "manifest.json").read_text())["cells"]
    entry = manifest["tiny_llama.atom_max.bnone"]
    assert (entry["status"], entry["error_kind"]) == ("expected_failure", "insufficient_memory")
    assert entry["error"].startswith("Insufficient memory for the required KV cache: only ")
    assert entry["error"].endswith(
        "but at least 65 blocks are required. Consider reducing `max_seq_len` or "
        "`batch_size` (currently 64) to lower the memory requirement."
    )
    again = _build(tmp_path, recipes, *args)
    assert again.returncode == 0, again.stdout + again.stderr
    summary = json.loads((build / "summary.json").read_text())
    assert (summary["compiled"], summary["redone_cells"]) == (0, [])  # stored, not retried
    assert "[compile" not in again.stderr
    assert json.loads((build / "manifest.json").read_text())["cells"] == manifest
