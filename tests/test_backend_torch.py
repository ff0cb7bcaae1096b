"""The torch backend: one export per compile key, self-contained deterministic cell artifacts,
rbln-build.json in optimum-rbln key names (no rbln_config.json: a CPU program is not an optimum-rbln
model), plans (never fake programs) for weightless recipes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from _torch_cells import compiled, finalized, spec_for  # noqa: E402

from rbln_build.backends import get_backend  # noqa: E402
from rbln_build.errors import BuildError  # noqa: E402
from rbln_build.estimator._report import AllocationReport  # noqa: E402
from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR, load_recipe  # noqa: E402

REPO = DEFAULT_RECIPES_DIR.parent


@pytest.mark.integration
def test_importing_backends_and_toolchain_do_not_import_torch() -> None:
    code = (
        "import sys\n"
        "import rbln_build.backends\n"
        "from rbln_build.backends import get_backend\n"
        "t = get_backend('torch').toolchain()\n"
        "assert set(t) >= {'torch', 'transformers'}, t\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


@pytest.mark.parametrize("name", ["tiny_llama", "tiny_qwen3"])
def test_compile_produces_a_program_and_the_memory_model_report(name: str) -> None:
    from rbln_build.memory import _model as memory

    c = compiled(name)
    assert c.result.produced == "program"
    assert c.exports == 1
    assert isinstance(c.result.report, AllocationReport)
    assert c.result.report == memory.build_report(c.spec)  # the live model's inventory agrees
    on_disk = AllocationReport.from_json(json.loads((c.baseline / "report.json").read_text()))
    assert on_disk == c.result.report
    assert sorted(p.name for p in c.baseline.iterdir()) == [
        "baseline.json",
        "config.json",
        "program.pt2",
        "report.json",
    ]


def test_two_budgets_of_one_compile_key_share_one_export() -> None:
    from rbln_build.backends.torch import _paged as paged

    c = compiled("tiny_llama")
    before = paged.export_count()
    att = c.spec.attention
    low, high = finalized("tiny_llama", att.num_min_blocks), finalized("tiny_llama", att.num_full_blocks)
    assert paged.export_count() == before  # finalize never exports
    assert c.exports == 1  # the one export of this compile key
    assert (low / "program.pt2").read_bytes() == (high / "program.pt2").read_bytes()
    a = json.loads((low / "rbln-build.json").read_text())
    b = json.loads((high / "rbln-build.json").read_text())
    assert (a["kvcache_num_blocks"], b["kvcache_num_blocks"]) == (5, 8)
    assert {k for k in a if a[k] != b[k]} == {"kvcache_num_blocks", "kv_pool"}


def test_the_cell_record_uses_optimum_rbln_names_and_records_the_npu_and_the_program_digest() -> None:
    cell = finalized("tiny_llama", 5)
    cfg = json.loads((cell / "rbln-build.json").read_text())
    assert cfg["artifact"] == "program" and cfg["format"] == "rbln-build/cell/1"
    assert cfg["programs"] == {"program.pt2": hashlib.sha256((cell / "program.pt2").read_bytes()).hexdigest()}
    assert {
        k: cfg[k]
        for k in (
            "kvcache_num_blocks",
            "batch_size",
            "max_seq_len",
            "attn_impl",
            "kvcache_partition_len",
            "kvcache_block_size",
            "prefill_chunk_size",
            "num_devices",
            "npu",
        )
    } == {
        "kvcache_num_blocks": 5,
        "batch_size": 2,
        "max_seq_len": 4096,
        "attn_impl": "flash_attn",
        "kvcache_partition_len": 1024,
        "kvcache_block_size": 1024,
        "prefill_chunk_size": 128,
        "num_devices": 1,
        "npu": "RBLN-CA25",
    }
    assert cfg["kv_pool"] == {
        "num_layers": 2,
        "kv_heads": 4,
        "block_size": 1024,
        "head_dim": 32,
        "dtype": "float32",
        "num_blocks": 5,
        "layer_types": ["full_attention", "full_attention"],
    }
    assert json.loads((cell / "config.json").read_text()) == load_recipe("tiny_llama").hf_config
    assert sorted(p.name for p in cell.iterdir()) == ["config.json", "program.pt2", "rbln-build.json"]


def test_artifacts_hold_no_paths_and_are_self_contained(tmp_path) -> None:
    c = compiled("tiny_llama")
    cell = finalized("tiny_llama", 6)
    for f in [*cell.iterdir(), *c.baseline.iterdir()]:
        data = f.read_bytes()
        for needle in (str(c.baseline.parent.parent), str(REPO), os.path.expanduser("~")):
            assert needle.encode() not in data, f"{f.name} contains {needle}"
    moved = tmp_path / "moved"
    shutil.copytree(cell, moved)  # a copy still loads and runs without the baseline or recipes
    from rbln_build.backends.torch._runtime import load_artifact

    assert len(load_artifact(moved).generate([[1, 2, 3]], 2)[0]) == 2


def test_compile_is_byte_identical_for_identical_inputs(tmp_path) -> None:
    c = compiled("tiny_llama")
    again = tmp_path / "again"
    again.mkdir()
    get_backend("torch").compile(c.spec, again)
    for f in sorted(c.baseline.iterdir()):
        assert (again / f.name).read_bytes() == f.read_bytes(), f.name
    cell = tmp_path / "cell"
    cell.mkdir()
    get_backend("torch").finalize(c.spec, again, 5, cell)
    for f in sorted(finalized("tiny_llama", 5).iterdir()):
        assert (cell / f.name).read_bytes() == f.read_bytes(), f.name


@pytest.mark.parametrize("bad", [0, -1, 9, True, 2.5], ids=["zero", "negative", "over_full", "bool", "float"])
def test_finalize_rejects_a_count_outside_the_pool(tmp_path, bad) -> None:
    c = compiled("tiny_llama")
    with pytest.raises(BuildError, match="kvcache_num_blocks"):
        get_backend("torch").finalize(c.spec, c.baseline, bad, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_finalize_refuses_a_tampered_baseline(tmp_path) -> None:
    c = compiled("tiny_llama")
    base = tmp_path / "base"
    shutil.copytree(c.baseline, base)
    with open(base / "program.pt2", "ab") as f:
        f.write(b"x")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(BuildError, match="sha256"):
        get_backend("torch").finalize(c.spec, base, 5, out)


def test_recipe_without_weights_yields_a_plan_not_a_program(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "recipes" / "plan_llama"
    d.mkdir(parents=True)
    shutil.copyfile(DEFAULT_RECIPES_DIR / "tiny_llama" / "config.json", d / "config.json")
    (d / "recipe.yaml").write_text(
        "name: plan_llama\nweights: null\ndtype: float32\n"
        "build: {batch_size: 2, max_seq_len: 4096, attn_impl: flash_attn, kvcache_partition_len: 1024}\n"
    )
    spec = spec_for(load_recipe("plan_llama", root=tmp_path / "recipes"))
    backend = get_backend("torch")
    base, cell = tmp_path / "base", tmp_path / "cell"
    base.mkdir()
    cell.mkdir()
    result = backend.compile(spec, base)
    assert result.produced == "plan"
    assert not (base / "program.pt2").exists()
    backend.finalize(spec, base, 6, cell)
    cfg = json.loads((cell / "rbln-build.json").read_text())
    assert cfg["artifact"] == "plan" and cfg["kvcache_num_blocks"] == 6 and cfg["npu"] == "RBLN-CA25"
    assert cfg["programs"] == {}
    assert sorted(p.name for p in cell.iterdir()) == ["config.json", "rbln-build.json"]  # no rbln_config.json
