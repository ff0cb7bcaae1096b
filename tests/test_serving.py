"""The serving record of a manifest entry: vllm-rbln 0.12.0 flags that agree with the cell."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest

from rbln_build.config._config import compose_settings
from rbln_build.config._matrix import expand
from rbln_build.errors import UserError
from rbln_build.estimator import fraction_for_bytes, resolve_budget
from rbln_build.pipeline import check_compiled_devices, compiled_num_devices
from rbln_build.pipeline._manifest import entry_for
from rbln_build.pipeline._serving import (
    command_for,
    serve_fraction,
    serving_for,
    with_budget,
)
from rbln_build.store._result import CellResult

TOOLCHAIN = {"torch": "t", "transformers": "t", "format": "1"}


def cell(cell_id: str, *overrides: str):
    return {c.id: c for c in expand(compose_settings(["matrix=plans", *overrides]), TOOLCHAIN)}[cell_id]


def ok(blocks: int, budget_bytes: int | None, produced: str = "plan") -> CellResult:
    return CellResult(
        "c" * 64,
        "k" * 64,
        kvcache_num_blocks=blocks,
        num_full_blocks=40,
        num_min_blocks=9,
        budget_bytes=budget_bytes,
        produced=produced,
        artifact_key="a" * 64,
        artifact_hash="sha256:" + "b" * 64,
    )


def test_a_plan_is_compiled_at_start_up_with_the_cells_budget_as_the_fraction() -> None:
    c = cell("qwen3_8b.rebel100.b0.3")
    serving = entry_for(c, ok(21, 45_097_156_608))["serving"]
    assert serving["model"] == "Qwen/Qwen3-8B" and not serving["precompiled"] and serving["exact"]
    flags = serving["flags"]
    assert {k: v for k, v in flags.items() if k != "gpu_memory_utilization"} == {
        "max_num_seqs": 8,
        "max_model_len": 40960,
        "block_size": 8192,
        "max_num_batched_tokens": 512,
        "dtype": "bfloat16",
        "rbln_num_devices_per_local_rank": 1,
    }
    assert resolve_budget(flags["gpu_memory_utilization"], c.npu) == 45_097_156_608


def test_an_rbln_program_is_served_precompiled_from_its_artifact() -> None:
    c = replace(cell("qwen3_8b.atom_max_x4.b0.5"), backend="rbln")
    serving = serving_for(c, ok(14, 8_438_939_648, produced="rbln"))
    assert serving is not None and serving["precompiled"] and serving["exact"]
    assert (
        serving["model"] == "artifacts/qwen3_8b.atom_max_x4.b0.5" and "gpu_memory_utilization" not in serving["flags"]
    )
    assert (
        serving["flags"]["max_num_batched_tokens"] == 128 and serving["flags"]["rbln_num_devices_per_local_rank"] == 4
    )
    command = command_for(serving, 8000, (4, 5, 6, 7), "build")
    assert command["env"] == {"VLLM_RBLN_USE_VLLM_MODEL": "0", "RBLN_VISIBLE_DEVICES": "4,5,6,7"}
    assert command["argv"][:5] == ["vllm", "serve", "build/artifacts/qwen3_8b.atom_max_x4.b0.5", "--port", "8000"]
    assert command["argv"][-2:] == ["--additional-config", '{"optimum_overrides": {"device": [0, 1, 2, 3]}}']
    assert command["shell"].startswith(
        "VLLM_RBLN_USE_VLLM_MODEL=0 RBLN_VISIBLE_DEVICES=4,5,6,7 vllm serve build/artifacts/"
    )


def test_an_explicit_count_cannot_be_reproduced_by_compiling_at_start_up() -> None:
    c = cell("qwen3_8b.rebel100.bnone.n12", "matrix.budgets=[null]", "matrix.kvcache_num_blocks=[12]")
    serving = serving_for(c, ok(12, 150_323_855_360))
    assert serving is not None and not serving["exact"] and "gpu_memory_utilization" not in serving["flags"]
    assert "explicit kvcache_num_blocks (12) cannot be passed" in serving["notes"][-1]


def test_an_explicit_count_is_served_by_the_budget_a_deployment_records_for_it() -> None:
    # A deployment in mode blocks records, per model, the smallest budget resolving to its built count
    # (serve_budget_bytes); with it the start-up compile gets that count, without it the record says
    # why not. A precompiled cell keeps its own count and gets no fraction.
    c = cell("qwen3_8b.rebel100.bnone.n12", "matrix.budgets=[null]", "matrix.kvcache_num_blocks=[12]")
    explicit = serving_for(c, ok(12, 150_323_855_360))
    assert explicit is not None
    budget = 4 * 9_000 * 2**20
    served = with_budget(explicit, budget, c.npu)
    assert served["exact"] and resolve_budget(served["flags"]["gpu_memory_utilization"], c.npu) == budget
    assert (
        not any("cannot be passed" in n for n in served["notes"]) and "memory_budget 37748736000" in served["notes"][-1]
    )
    command = command_for(served, 8000, (0,), "build")
    assert command["argv"][command["argv"].index("--gpu-memory-utilization") + 1] == str(
        served["flags"]["gpu_memory_utilization"]
    )
    unserved = with_budget(explicit, None, c.npu)
    assert not unserved["exact"] and "gpu_memory_utilization" not in unserved["flags"]
    assert "no memory_budget resolves to exactly 12 blocks" in unserved["notes"][-1]
    precompiled = serving_for(replace(c, backend="rbln"), ok(12, 150_323_855_360, produced="rbln"))
    assert precompiled is not None and with_budget(precompiled, budget, c.npu) == precompiled


def test_the_fraction_is_never_vllms_default_which_vllm_rbln_serves_as_093() -> None:
    # vllm-rbln 0.12.0 raises a --gpu-memory-utilization equal to upstream vLLM's default (0.92) to 0.93
    # (RblnPlatform.apply_config_platform_defaults). No shipped NPU's smallest fraction is exactly 0.92
    # (their available bytes are not multiples of 25); on one whose are, the next float up is passed.
    npu = SimpleNamespace(name="made-up", available_bytes=16_000_000_000, num_chiplets=1)
    budget = 14_720_000_000  # 0.92 of it, exactly
    assert serve_fraction(budget, npu) == math.nextafter(0.92, 1.0)
    c = cell("qwen3_8b.rebel100.bnone.n12", "matrix.budgets=[null]", "matrix.kvcache_num_blocks=[12]")
    served = with_budget(serving_for(c, ok(12, 150_323_855_360)), budget, npu)  # type: ignore[arg-type]
    fraction = served["flags"]["gpu_memory_utilization"]
    assert fraction != 0.92 and int(npu.available_bytes * fraction) == budget and served["exact"]
    real = cell("qwen3_8b.rebel100.b0.3").npu
    nbytes = int(real.available_bytes * 0.92)
    assert serve_fraction(nbytes, real) == fraction_for_bytes(nbytes, real.available_bytes) < 0.92  # as it is


def test_a_failed_cell_has_no_serving_record() -> None:
    c = cell("qwen3_8b.rebel100.b0.3")
    failed = CellResult("c" * 64, "k" * 64, error="x", error_kind="insufficient_memory")
    assert entry_for(c, failed)["serving"] is None and serving_for(c, None) is None


def test_a_synthetic_recipe_names_no_hub_model_whatever_its_source_model_id() -> None:
    # tiny_llama's source.model_id (rbln-build/tiny-llama) names no hub model: its weights are seeded.
    # Its torch program is refused with the reason; its rbln cell is a compiled model, but it carries no
    # tokenizer and there is no hub model to take one from, so it is refused too: never a made-up id.
    c = {c.id: c for c in expand(compose_settings([]), TOOLCHAIN)}["tiny_llama.rebel100.b0.3"]
    program = serving_for(c, ok(8, 45_097_156_608, produced="program"))
    assert program is not None and program["model"] is None and program["tokenizer"] is None
    assert "synthetic recipe (seeded weights)" in program["refused"] and "rbln-build/tiny-llama" in program["refused"]
    compiled = serving_for(replace(c, backend="rbln"), ok(8, 45_097_156_608, produced="rbln"))
    assert compiled is not None and compiled["tokenizer"] is None and not compiled["exact"]
    assert "carries no tokenizer" in compiled["refused"] and "names no hub model" in compiled["refused"]
    for serving in (program, compiled):
        with pytest.raises(UserError, match="no serve command") as info:
            command_for(serving, 8000, (0,), "build")
        assert "vllm serve" not in str(info.value)


def test_compiled_num_devices_reads_rbln_config_as_vllm_rbln_does() -> None:
    compiled = {"_compile_cfgs": [{"compiled_model_name": "prefill", "npu": "RBLN-CA25", "num_devices": 4}]}
    assert compiled_num_devices(compiled) == 4
    assert compiled_num_devices({"_compile_cfgs": [{"num_devices": None}]}) == 1  # what the CLI's resize writes
    assert compiled_num_devices({"num_devices": 2, "_compile_cfgs": [{"num_devices": 4}]}) == 2
    assert compiled_num_devices({"language_model": compiled, "num_devices": 1}) == 4
    serving = {"precompiled": True, "flags": {"rbln_num_devices_per_local_rank": 4}}
    check_compiled_devices(serving, compiled, "cell/rbln_config.json")
    with pytest.raises(UserError, match=r"cell/rbln_config.json: cell compiled for 4 device\(s\), but .* gives"):
        check_compiled_devices(serving, {"_compile_cfgs": [{"num_devices": None}]}, "cell/rbln_config.json")


@pytest.mark.parametrize(
    ("model_id", "seeded", "expected"),
    [
        pytest.param("Qwen/Qwen3-8B", False, "Qwen/Qwen3-8B", id="hub-id"),
        pytest.param("gpt2", False, "gpt2", id="no-namespace"),
        pytest.param("rbln-build/tiny-llama", True, None, id="synthetic"),
        pytest.param(None, False, None, id="none"),
        pytest.param("/data/checkpoints/x", False, None, id="absolute-path"),
        pytest.param("a/b/c", False, None, id="a-path"),
        pytest.param("../x", False, None, id="dots"),
    ],
)
def test_only_a_hub_repo_id_of_a_recipe_with_real_weights_is_a_hub_model(model_id, seeded, expected) -> None:
    from rbln_build.memory._recipes import load_recipe

    recipe = replace(load_recipe("qwen3_8b"), source={"model_id": model_id}, seed=1 if seeded else None)
    assert recipe.hub_model_id == expected
