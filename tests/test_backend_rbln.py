"""The ``rbln`` backend's contract, against stand-in ``rebel`` and ``optimum.rbln`` modules
(tests/fakes, put on sys.path by this module only): one compile per key with auto blocks, the
AllocationReport read from the compiled models, cells rescaled to the resolved count with
(target, current), the target NPU recorded; a clear error without the SDK."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from rbln_build.backends import get_backend
from rbln_build.errors import BackendUnavailable
from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR, load_recipe

from _torch_cells import spec_for

FAKES = Path(__file__).parent / "fakes"

MiB = 2**20


def _drop_sdk_modules() -> None:
    for name in list(sys.modules):
        if name in ("rebel", "optimum") or name.startswith(("rebel.", "optimum.")):
            del sys.modules[name]


@pytest.fixture
def no_sdk(monkeypatch):
    _drop_sdk_modules()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p) != FAKES])
    yield
    _drop_sdk_modules()


@pytest.fixture
def fake_sdk(monkeypatch):
    _drop_sdk_modules()
    monkeypatch.syspath_prepend(str(FAKES))
    import optimum.rbln
    import rebel

    rebel.CALLS.clear()
    optimum.rbln.COMPILES.clear()
    yield rebel, optimum.rbln
    _drop_sdk_modules()


def test_without_the_sdk_selecting_rbln_says_what_to_install(no_sdk) -> None:
    with pytest.raises(BackendUnavailable) as info:
        get_backend("rbln")
    msg = str(info.value)
    assert "'rebel'" in msg and "'optimum.rbln'" in msg
    assert "pip install optimum-rbln==0.12.0" in msg and "rebel-compiler" in msg and "matrix.backend=torch" in msg


def test_toolchain_names_the_sdk_versions(fake_sdk) -> None:
    from importlib import metadata

    assert get_backend("rbln").toolchain() == {
        "rebel-compiler": "0.0.0+fake",
        "optimum-rbln": "0.12.0+fake",
        "torch": metadata.version("torch"),
        "transformers": metadata.version("transformers"),
    }


@pytest.fixture
def compiled_llama(fake_sdk, tmp_path):
    rebel, orbln = fake_sdk
    spec = spec_for(load_recipe("tiny_llama"))
    base = tmp_path / "base"
    base.mkdir()
    result = get_backend("rbln").compile(spec, base)
    return spec, base, result, rebel, orbln


def test_compile_once_with_auto_blocks_and_report_from_the_compiled_models(compiled_llama) -> None:
    spec, base, result, rebel, orbln = compiled_llama
    assert result.produced == "program"
    assert len(orbln.COMPILES) == 1
    sent = orbln.COMPILES[0]
    assert "kvcache_num_blocks" not in sent  # auto
    assert sent["npu"] == "RBLN-CA25" and sent["num_devices"] == 1 and sent["kvcache_block_size"] == 1024
    report = result.report
    assert report.current_blocks == 7  # what the compiler settled on, the sizes' unit
    assert set(report.alloc) == {"prefill", "decoder_batch_2"}
    assert all("DramTensor" not in keys for keys in report.alloc.values())
    assert report.alloc["prefill"]["weights"] == ((50 * MiB,),)
    per_block = 4 * 1024 * 32 * 2
    assert {n: (t.can_resize, t.sizes) for n, t in report.kv_tensors.items()} == {
        f"past_key_values_{i}_{p}": (True, ((per_block * 7,),)) for i in range(2) for p in ("key", "value")
    }
    assert json.loads((base / "report.json").read_text()) == report.to_json()


def test_finalize_rescales_every_graph_to_the_resolved_count_and_records_the_npu(compiled_llama, tmp_path) -> None:
    spec, base, _, rebel, orbln = compiled_llama
    backend = get_backend("rbln")
    for n in (5, 8):
        cell = tmp_path / f"cell{n}"
        cell.mkdir()
        backend.finalize(spec, base, n, cell)
        cfg = json.loads((cell / "rbln_config.json").read_text())
        assert cfg["kvcache_num_blocks"] == n and cfg["npu"] == "RBLN-CA25"
        prefill = json.loads((cell / "prefill.rbln").read_text())
        assert prefill["dram_tensors"]["past_key_values_0_key"] == [[4 * 1024 * 32 * 2 * n]]
        assert sorted(p.name for p in cell.iterdir()) == [
            "config.json", "decoder_batch_2.rbln", "prefill.rbln", "rbln_config.json"
        ]
    rescales = [c for c in rebel.CALLS if c[0] == "exp_rescale_buffer_size"]
    assert [(g, set(r.values())) for _, g, r in rescales] == [
        ("decoder_batch_2", {(5, 7)}), ("prefill", {(5, 7)}), ("decoder_batch_2", {(8, 7)}), ("prefill", {(8, 7)})
    ]
    assert len(orbln.COMPILES) == 1  # two cells, one compile
    # The baseline is untouched: still 7 blocks.
    assert json.loads((base / "rbln_config.json").read_text())["kvcache_num_blocks"] == 7


def test_estimator_over_the_rbln_report_picks_the_cell_count(compiled_llama, tmp_path) -> None:
    from rbln_build.estimator import Request, estimate

    spec, base, result, _, _ = compiled_llama
    att = spec.attention
    request = Request.for_attention(spec.npu.name, spec.num_devices, att, memory_budget=1.0,
                                    current_blocks=result.report.current_blocks)
    n = estimate(request, result.report).raise_for_error().kvcache_num_blocks
    assert n == att.num_full_blocks  # tiny: the whole pool fits an ATOM
    cell = tmp_path / "cell"
    cell.mkdir()
    get_backend("rbln").finalize(spec, base, n, cell)
    assert json.loads((cell / "rbln_config.json").read_text())["kvcache_num_blocks"] == n


def test_sliding_window_caches_are_reported_fixed_and_never_rescaled(fake_sdk, tmp_path) -> None:
    rebel, _ = fake_sdk
    d = tmp_path / "recipes" / "slide"
    d.mkdir(parents=True)
    cfg = json.loads((DEFAULT_RECIPES_DIR / "tiny_qwen3" / "config.json").read_text())
    cfg.update(use_sliding_window=True, sliding_window=512,
               layer_types=["sliding_attention", "full_attention", "full_attention"])
    (d / "config.json").write_text(json.dumps(cfg))
    text = (DEFAULT_RECIPES_DIR / "tiny_qwen3" / "recipe.yaml").read_text().replace("tiny_qwen3", "slide")
    (d / "recipe.yaml").write_text(text)
    spec = spec_for(load_recipe("slide", root=tmp_path / "recipes"))
    base, cell = tmp_path / "base", tmp_path / "cell"
    base.mkdir()
    cell.mkdir()
    backend = get_backend("rbln")
    report = backend.compile(spec, base).report
    assert not report.kv_tensors["past_key_values_0_key"].can_resize
    assert report.kv_tensors["past_key_values_1_key"].can_resize
    backend.finalize(spec, base, 6, cell)
    ratios = [r for c, _, r in rebel.CALLS if c == "exp_rescale_buffer_size"]
    assert ratios and all("past_key_values_0_key" not in r and "past_key_values_1_key" in r for r in ratios)


def test_a_recipe_without_weights_is_a_plan_without_compiling(fake_sdk, tmp_path, monkeypatch) -> None:
    _, orbln = fake_sdk
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "recipes" / "plan"
    d.mkdir(parents=True)
    shutil.copyfile(DEFAULT_RECIPES_DIR / "tiny_llama" / "config.json", d / "config.json")
    (d / "recipe.yaml").write_text(
        "name: plan\nweights: null\ndtype: float32\n"
        "build: {batch_size: 2, max_seq_len: 4096, attn_impl: flash_attn, kvcache_partition_len: 1024}\n"
    )
    spec = spec_for(load_recipe("plan", root=tmp_path / "recipes"))
    base, cell = tmp_path / "base", tmp_path / "cell"
    base.mkdir()
    cell.mkdir()
    backend = get_backend("rbln")
    assert backend.compile(spec, base).produced == "plan"
    backend.finalize(spec, base, 5, cell)
    assert json.loads((cell / "rbln_config.json").read_text())["artifact"] == "plan"
    assert orbln.COMPILES == []
