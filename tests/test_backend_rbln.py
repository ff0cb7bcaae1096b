"""The ``rbln`` backend against the real optimum-rbln 0.12.0, with only the compiler ``rebel`` stood in
(tests/fakes/rebel): compile through ``RBLNAutoModelForCausalLM.from_pretrained(export=True)``, the
report read from the compiled models, cells that optimum-rbln itself loads and that are byte-identical
to its CLI's ``--set-kvcache-num-blocks``, the library's limits (floor, eager, insufficient memory) as
stored input failures, local checkpoints, and a clear error without the SDK.

Skipped (all but the no-SDK test) when optimum-rbln is not installed; see tests/_rbln_sdk.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from _rbln_sdk import TOO_BIG_BUILD, TOO_BIG_CONFIG, hide_sdk, make_recipe, needs_optimum_rbln, sdk_on_path
from _torch_cells import spec_for

from rbln_build.backends import get_backend
from rbln_build.errors import BackendUnavailable, InputFailure
from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR, load_recipe

MiB = 2**20
LLAMA_KV_PER_BLOCK = 1 * 4 * 1024 * 32 * 4  # one K (or V) tensor, one block: kv_heads 4, block 1024, head_dim 32, fp32


def test_without_the_sdk_selecting_rbln_says_what_to_install(monkeypatch) -> None:
    hide_sdk(monkeypatch)
    with pytest.raises(BackendUnavailable) as info:
        get_backend("rbln")
    msg = str(info.value)
    assert "'rebel'" in msg and "'optimum.rbln'" in msg and "rebel-compiler" in msg and "matrix.backend=torch" in msg
    assert "pip install optimum-rbln==0.12.0 --extra-index-url https://download.pytorch.org/whl/cpu" in msg


@pytest.fixture(scope="module")
def sdk():
    with pytest.MonkeyPatch.context() as mp:
        yield sdk_on_path(mp)


@pytest.fixture(scope="module")
def compiled_llama(sdk, tmp_path_factory):
    rebel, _ = sdk
    spec = spec_for(load_recipe("tiny_llama"))
    base = tmp_path_factory.mktemp("rbln") / "base"
    base.mkdir()
    first = len(rebel.COMPILES)
    result = get_backend("rbln").compile(spec, base)
    return spec, base, result, rebel.COMPILES[first:]


def _finalize(spec, base: Path, n: int, out: Path) -> Path:
    out.mkdir()
    get_backend("rbln").finalize(spec, base, n, out)
    return out


def _cli_set_value(base: Path, n: int, out: Path) -> None:
    from optimum.rbln.cli import _handle_kvcache_num_blocks  # the real CLI's handler

    _handle_kvcache_num_blocks(str(base), get=False, set_value=n, output_dir=str(out))


@needs_optimum_rbln
def test_toolchain_names_the_real_library_and_the_stand_in_compiler(sdk) -> None:
    from importlib import metadata

    assert get_backend("rbln").toolchain() == {
        "rebel-compiler": "0.12.0+standin",
        "optimum-rbln": "0.12.0",
        "torch": metadata.version("torch"),
        "transformers": metadata.version("transformers"),
    }


@needs_optimum_rbln
def test_compile_traces_the_model_through_optimum_rbln_and_reports_from_the_compiled_models(compiled_llama) -> None:
    spec, base, result, compiles = compiled_llama
    assert result.produced == "rbln"
    # optimum-rbln traced its own wrappers: prefill and one decoder, through rbln_custom_ops, for the target NPU
    assert [(c["npu"], c["num_devices"], c["custom_ops"]) for c in compiles] == [
        ("RBLN-CA25", 1, ["linear", "paged_flash_causal_attn_prefill"]),
        ("RBLN-CA25", 1, ["linear", "paged_flash_causal_attn_decode"]),
    ]
    report = result.report
    assert report.current_blocks == 8  # the full pool fits 100% of an ATOM-Max
    assert set(report.alloc) == {"prefill", "decoder_batch_2"}
    assert all("DramTensor" not in keys for keys in report.alloc.values())
    assert {n: (t.can_resize, t.sizes) for n, t in report.kv_tensors.items()} == {
        f"past_key_values_{i}": (True, ((LLAMA_KV_PER_BLOCK * 8,),)) for i in range(4)
    }
    assert json.loads((base / "report.json").read_text()) == report.to_json()
    saved = json.loads((base / "rbln_config.json").read_text())
    assert saved["kvcache_num_blocks"] == 8 and "npu" not in saved  # optimum-rbln's file, untouched
    assert {cfg["npu"] for cfg in saved["_compile_cfgs"]} == {"RBLN-CA25"}
    baseline = json.loads((base / "baseline.json").read_text())
    assert baseline["programs"] == {
        f: hashlib.sha256((base / f).read_bytes()).hexdigest() for f in ("decoder_batch_2.rbln", "prefill.rbln")
    }


@needs_optimum_rbln
@pytest.mark.parametrize("n", [5, 8], ids=["floor", "full"])
def test_cells_load_in_optimum_rbln_and_equal_its_cli_set_value(compiled_llama, tmp_path, n, capsys) -> None:
    from optimum.rbln import RBLNAutoModelForCausalLM
    from optimum.rbln.cli import _handle_kvcache_num_blocks

    spec, base, _, _ = compiled_llama
    cell = _finalize(spec, base, n, tmp_path / "cell")
    model = RBLNAutoModelForCausalLM.from_pretrained(str(cell), export=False, rbln_create_runtimes=False)
    assert model.rbln_config.kvcache_num_blocks == n
    capsys.readouterr()
    _handle_kvcache_num_blocks(str(cell), get=True, set_value=None)
    assert capsys.readouterr().out.strip() == str(n)
    cli = tmp_path / "cli"
    _cli_set_value(base, n, cli)
    ours = sorted(p.name for p in cell.iterdir())
    assert ours == [
        "config.json",
        "decoder_batch_2.rbln",
        "generation_config.json",
        "prefill.rbln",
        "rbln-build.json",
        "rbln_config.json",
    ]
    for name in ours:
        if name not in ("rbln-build.json", "rbln_config.json"):
            assert (cell / name).read_bytes() == (cli / name).read_bytes(), name
    # rbln_config.json: the CLI's, except that the compile's target NPU and device count stay in
    # _compile_cfgs (the CLI's round trip through its config class writes them as null)
    ours_config, cli_config = (json.loads((d / "rbln_config.json").read_text()) for d in (cell, cli))
    placement = [(c["npu"], c["num_devices"]) for c in ours_config.pop("_compile_cfgs")]
    assert placement == [("RBLN-CA25", 1), ("RBLN-CA25", 1)]
    assert [(c["npu"], c["num_devices"]) for c in cli_config.pop("_compile_cfgs")] == [(None, None), (None, None)]
    assert ours_config == cli_config
    prefill = json.loads((cell / "prefill.rbln").read_text())
    assert prefill["dram_tensors"]["past_key_values_0"] == [[LLAMA_KV_PER_BLOCK * n]]
    record = json.loads((cell / "rbln-build.json").read_text())
    assert (record["artifact"], record["npu"], record["kvcache_num_blocks"]) == ("rbln", "RBLN-CA25", n)
    assert record["programs"] == {
        f: hashlib.sha256((cell / f).read_bytes()).hexdigest() for f in ("decoder_batch_2.rbln", "prefill.rbln")
    }
    assert json.loads((base / "rbln_config.json").read_text())["kvcache_num_blocks"] == 8  # baseline untouched


@needs_optimum_rbln
def test_a_four_device_cell_records_its_device_count_where_vllm_rbln_reads_it(sdk, tmp_path) -> None:
    # optimum-rbln 0.12.0 records num_devices only in _compile_cfgs; its CLI's resize writes them as null,
    # so vllm-rbln (which takes the count from rbln_config.json, not from its flag) would serve 1 device.
    # The finalized cell keeps the compile's 4, read by vllm-rbln's own code from its wheel.
    from _vllm_rbln import resolve_num_devices

    from rbln_build.pipeline import compiled_num_devices

    rebel, _ = sdk
    spec = spec_for(load_recipe("tiny_llama"), num_devices=4)
    base = tmp_path / "base"
    base.mkdir()
    first = len(rebel.COMPILES)
    get_backend("rbln").compile(spec, base)
    assert {c["num_devices"] for c in rebel.COMPILES[first:]} == {4}
    cell = _finalize(spec, base, 6, tmp_path / "cell")
    cli = tmp_path / "cli"
    _cli_set_value(base, 6, cli)
    configs = {d.name: json.loads((d / "rbln_config.json").read_text()) for d in (base, cell, cli)}
    assert [c["num_devices"] for c in configs["base"]["_compile_cfgs"]] == [4, 4]
    assert [c["num_devices"] for c in configs["cell"]["_compile_cfgs"]] == [4, 4]
    assert "num_devices" not in configs["cell"]  # never at the top level: optimum-rbln does not save it there
    resolve = resolve_num_devices()
    assert {name: resolve(c) for name, c in configs.items()} == {"base": 4, "cell": 4, "cli": 1}
    assert {name: compiled_num_devices(c) for name, c in configs.items()} == {"base": 4, "cell": 4, "cli": 1}
    assert json.loads((cell / "rbln-build.json").read_text())["num_devices"] == 4


@needs_optimum_rbln
def test_a_count_below_the_floor_is_an_input_failure(compiled_llama, tmp_path) -> None:
    spec, base, _, _ = compiled_llama
    with pytest.raises(InputFailure) as info:
        _finalize(spec, base, 4, tmp_path / "cell")
    assert info.value.kind == "blocks_below_floor"
    assert str(info.value).startswith("The set `kvcache_num_blocks` (4) is less than the minimum number of blocks (5).")


@needs_optimum_rbln
def test_a_tampered_baseline_model_is_refused_before_it_is_loaded(compiled_llama, tmp_path) -> None:
    from rbln_build.errors import IntegrityError

    spec, base, _, _ = compiled_llama
    copy = tmp_path / "base"
    shutil.copytree(base, copy)
    (copy / "prefill.rbln").write_text((copy / "prefill.rbln").read_text().replace('"npu"', '"npu" ', 1))
    with pytest.raises(IntegrityError, match="prefill.rbln: sha256"):
        _finalize(spec, copy, 6, tmp_path / "cell")


@needs_optimum_rbln
def test_the_estimator_over_the_rbln_report_picks_the_cell_count(compiled_llama, tmp_path) -> None:
    from rbln_build.estimator import Request, estimate

    spec, base, result, _ = compiled_llama
    request = Request.for_attention(
        spec.npu.name, spec.num_devices, spec.attention, memory_budget=1.0, current_blocks=result.report.current_blocks
    )
    n = estimate(request, result.report).raise_for_error().kvcache_num_blocks
    assert n == spec.attention.num_full_blocks == 8  # tiny: the whole pool fits an ATOM
    cell = _finalize(spec, base, n, tmp_path / "cell")
    assert json.loads((cell / "rbln_config.json").read_text())["kvcache_num_blocks"] == n


@needs_optimum_rbln
def test_eager_compiles_the_full_pool_fixed_and_refuses_any_other_count(sdk, tmp_path) -> None:
    from optimum.rbln import RBLNAutoModelForCausalLM

    rebel, _ = sdk
    make_recipe(
        tmp_path / "recipes", "eager_llama", "tiny_llama", build={"attn_impl": "eager", "kvcache_partition_len": None}
    )
    spec = spec_for(load_recipe("eager_llama", root=tmp_path / "recipes"))
    assert spec.attention.attn_impl == "eager" and spec.attention.num_full_blocks == 2
    base = tmp_path / "base"
    base.mkdir()
    first = len(rebel.CALLS)
    report = get_backend("rbln").compile(spec, base).report
    assert not any(c[0] == "exp_multiply_buffer_size" for c in rebel.CALLS[first:])  # is_auto false: not grown
    assert report.current_blocks == 2 and not any(t.can_resize for t in report.kv_tensors.values())
    assert {t.sizes for t in report.kv_tensors.values()} == {((2 * 4 * 4096 * 32 * 4,),)}
    cell = _finalize(spec, base, 2, tmp_path / "cell")
    assert (
        RBLNAutoModelForCausalLM.from_pretrained(
            str(cell), export=False, rbln_create_runtimes=False
        ).rbln_config.kvcache_num_blocks
        == 2
    )
    for n in (1, 3):
        with pytest.raises(
            InputFailure,
            match=rf"kvcache_num_blocks {n}: the compiled KV cache of eager_llama holds "
            r"exactly 2 blocks and no cache can be resized \(optimum-rbln compiles "
            r"eager attention at the full pool",
        ) as info:
            _finalize(spec, base, n, tmp_path / f"cell{n}")
        assert info.value.kind == "kv_cache_not_resizable"


@needs_optimum_rbln
def test_a_model_too_big_for_its_target_fails_the_compile_as_insufficient_memory(sdk, tmp_path) -> None:
    make_recipe(
        tmp_path / "recipes", "too_big", "tiny_llama", config=TOO_BIG_CONFIG, build=TOO_BIG_BUILD, dtype="bfloat16"
    )
    spec = spec_for(load_recipe("too_big", root=tmp_path / "recipes"))
    assert (spec.attention.num_min_blocks, spec.attention.batch_size) == (65, 64)
    base = tmp_path / "base"
    base.mkdir()
    with pytest.raises(InputFailure) as info:
        get_backend("rbln").compile(spec, base)
    assert info.value.kind == "insufficient_memory"
    found = re.fullmatch(
        r"Insufficient memory for the required KV cache: only (\d+) blocks can be allocated, but at least 65 blocks "
        r"are required\. Consider reducing `max_seq_len` or `batch_size` \(currently 64\) to lower the memory "
        r"requirement\.",
        str(info.value),
    )
    assert found is not None, str(info.value)
    # 256 MiB a block: at most 16,096 MiB // 256 MiB = 62 blocks fit next to the (small) weights and workspace
    assert 0 < int(found.group(1)) <= 62


@needs_optimum_rbln
def test_a_local_checkpoint_without_config_json_compiles_the_recipes_config_and_dtype(sdk, tmp_path) -> None:
    from rbln_build.backends.torch._weights import build_model

    checkpoint = tmp_path / "checkpoint"
    build_model(load_recipe("tiny_llama")).save_pretrained(str(checkpoint))  # float32 safetensors
    (checkpoint / "config.json").unlink()
    (checkpoint / "generation_config.json").unlink(missing_ok=True)
    make_recipe(tmp_path / "recipes", "local_llama", "tiny_llama", dtype="bfloat16", weights={"path": str(checkpoint)})
    spec = spec_for(load_recipe("local_llama", root=tmp_path / "recipes"))
    base = tmp_path / "base"
    base.mkdir()
    report = get_backend("rbln").compile(spec, base).report
    recipe_config = json.loads((DEFAULT_RECIPES_DIR / "tiny_llama" / "config.json").read_text())
    compiled_config = json.loads((base / "config.json").read_text())
    assert {k: compiled_config[k] for k in ("architectures", "hidden_size", "num_hidden_layers", "vocab_size")} == {
        k: recipe_config[k] for k in ("architectures", "hidden_size", "num_hidden_layers", "vocab_size")
    }
    assert json.loads((base / "rbln_config.json").read_text())["dtype"] == "bfloat16"  # the recipe's, not the file's
    assert {t.sizes for t in report.kv_tensors.values()} == {((LLAMA_KV_PER_BLOCK // 2 * 8,),)}  # bf16 KV
    assert sorted(p.name for p in checkpoint.iterdir()) == ["model.safetensors"]  # nothing written next to it


@needs_optimum_rbln
def test_a_local_checkpoints_own_config_json_never_replaces_the_recipes(sdk, tmp_path) -> None:
    from rbln_build.backends.torch._weights import build_model

    checkpoint = tmp_path / "checkpoint"
    build_model(load_recipe("tiny_llama")).save_pretrained(str(checkpoint))
    decoy = json.loads((checkpoint / "config.json").read_text())
    decoy["max_position_embeddings"] = 4096  # a different model than the one the compile key names
    (checkpoint / "config.json").write_text(json.dumps(decoy))
    make_recipe(tmp_path / "recipes", "local_llama", "tiny_llama", weights={"path": str(checkpoint)})
    spec = spec_for(load_recipe("local_llama", root=tmp_path / "recipes"))
    base = tmp_path / "base"
    base.mkdir()
    get_backend("rbln").compile(spec, base)
    assert json.loads((base / "config.json").read_text())["max_position_embeddings"] == 8192


@needs_optimum_rbln
def test_a_recipe_without_weights_is_a_plan_without_compiling(sdk, tmp_path, monkeypatch) -> None:
    rebel, _ = sdk
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "recipes" / "plan"
    d.mkdir(parents=True)
    shutil.copyfile(DEFAULT_RECIPES_DIR / "tiny_llama" / "config.json", d / "config.json")
    (d / "recipe.yaml").write_text(
        "name: plan\nweights: null\ndtype: float32\n"
        "build: {batch_size: 2, max_seq_len: 4096, attn_impl: flash_attn, kvcache_partition_len: 1024}\n"
    )
    spec = spec_for(load_recipe("plan", root=tmp_path / "recipes"))
    base = tmp_path / "base"
    base.mkdir()
    first = len(rebel.COMPILES)
    backend = get_backend("rbln")
    assert backend.compile(spec, base).produced == "plan"
    cell = _finalize(spec, base, 5, tmp_path / "cell")
    assert json.loads((cell / "rbln-build.json").read_text())["artifact"] == "plan"
    assert not (cell / "rbln_config.json").exists()  # nothing a loader could take for a compiled model
    assert len(rebel.COMPILES) == first
