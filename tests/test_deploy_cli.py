"""Deployments through the real CLI (subprocesses): plan, explain, build, the manifest's record and
serve-command. The models' parameter inventories are computed once per test process and copied into
each test's cache (RBLN_BUILD_CACHE), so no subprocess builds one."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from _rbln_sdk import needs_optimum_rbln
from memory_helpers import _CACHE, inventory, spec
from test_cli import check_ok, manifest, rbln

from rbln_build.estimator import AllocationReport, Request, estimate, resolve_budget, resolve_npu

MiB = 2**20
REBEL = resolve_npu("RBLN-CR03")
ATOM = resolve_npu("RBLN-CA25")
QL = "deployment=qwen3_8b_llama3_2_1b"
FAKES = Path(__file__).parent / "fakes"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    for name in ("tiny_llama", "tiny_qwen3", "qwen3_8b", "llama3_2_1b"):
        inventory(name)
    shutil.copytree(_CACHE, tmp_path / "inv" / "inventory")
    return {"RBLN_BUILD_CACHE": str(tmp_path / "inv")}


def plan_json(args: list[str], tmp_path: Path, env: dict[str, str], code: int = 0) -> dict[str, Any]:
    proc = rbln(["plan", *args, "--json", f"build_dir={tmp_path / 'build'}"], cwd=tmp_path, env=env)
    check_ok(proc, code)
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def record_of(artifact: Path) -> dict[str, Any]:
    """The cell's own record: rbln-build.json (every cell), else rbln_config.json (older artifacts)."""
    for name in ("rbln-build.json", "rbln_config.json"):
        if (artifact / name).is_file():
            return json.loads((artifact / name).read_text())  # type: ignore[no-any-return]
    raise AssertionError(f"{artifact} holds no record")


def test_plan_json_of_the_tiny_pair(tmp_path: Path, env: dict[str, str]) -> None:
    data = plan_json(["deployment=tiny_pair"], tmp_path, env)
    assert (
        data["feasible"]
        and data["mode"] == "budget"
        and data["target"]["available_per_chiplet"] == ATOM.available_bytes
    )
    budget, blocks = data["plans"]["budget"], data["plans"]["blocks"]
    assert {
        n: (m["memory_budget"], m["budget_bytes"], m["kvcache_num_blocks"]) for n, m in budget["models"].items()
    } == {"tiny_llama": ("86MB", 86 * MiB, 6), "tiny_qwen3": ("140MB", 140 * MiB, 16)}
    assert {n: m["kvcache_num_blocks"] for n, m in blocks["models"].items()} == {"tiny_llama": 6, "tiny_qwen3": 16}
    assert budget["objective"] == {"min_share": 0.75, "weighted_share": 1.75, "total_blocks": 22}
    assert budget["per_chiplet"]["headroom"] == [[0]]
    assert [m["report"] for m in data["models"]] == ["memory model", "memory model"]
    # the fraction resolves to the planned bytes
    assert resolve_budget(budget["models"]["tiny_llama"]["budget_fraction"], ATOM) == 86 * MiB


def test_plan_of_an_infeasible_pair_names_the_conflict_and_verified_changes(
    tmp_path: Path, env: dict[str, str]
) -> None:
    tight = ATOM.available_bytes - 194 * MiB  # see tests/test_deploy_planner.py for the arithmetic
    proc = rbln(
        ["plan", "deployment=tiny_pair", f"deployment.reservations.0.bytes={tight}", f"build_dir={tmp_path / 'build'}"],
        cwd=tmp_path,
        env=env,
    )
    check_ok(proc, 1)
    out = proc.stdout
    assert (
        "budget plan: the smallest memory_budget per model that resolves to its count (what `rbln-build "
        "deployment=tiny_pair` builds): DOES NOT FIT; 2 model(s) cannot fit:\n  tiny_llama fits alone but not "
        "together with tiny_qwen3" in out
    )
    assert "  tiny_qwen3: max_seq_len 8192 -> 3072: gives up 0.6250; plan: tiny_llama 6, tiny_qwen3 4" in out
    assert "\n      deployment.models.1.max_seq_len=3072\n" in out  # the override that applies it
    assert "  reservation other_tenant: bytes 16,674,455,552 -> 16,653,484,032" in out
    assert not (tmp_path / "build" / "manifest.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param([], "no deployment chosen: add deployment=<name>", id="none"),
        pytest.param(
            ["deployment=nope"],
            "deployment=nope: no such option; (the options: qwen3_8b_llama3_2_1b, tiny_pair)",
            id="unknown",
        ),
        pytest.param(["deployment=tiny_pair", "deployment.mode=fast"], "Invalid value 'fast'", id="mode"),
    ],
)
def test_plan_errors_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    proc = rbln(["plan", *args], cwd=tmp_path)
    check_ok(proc, 2)
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_qwen3_8b_and_llama3_2_1b_on_one_rebel100_planned_built_and_served(tmp_path: Path, env: dict[str, str]) -> None:
    build = tmp_path / "build"
    planned = plan_json([QL], tmp_path, env)["plans"]["budget"]["models"]
    proc = rbln([QL, f"build_dir={build}"], cwd=tmp_path, env=env)
    check_ok(proc)
    assert (
        "deployment qwen3_8b_llama3_2_1b (budget): qwen3_8b 33 blocks, llama3_2_1b 29 blocks; per-chiplet "
        "totals from the built reports fit" in proc.stdout
    )
    m = manifest(build)
    record = m["deployments"]["qwen3_8b_llama3_2_1b"]
    assert record["status"] == "ok" and record["fits"] and record["problems"] == []
    models = record["models"]
    for name, expected in (("qwen3_8b", ("56544MB", 33)), ("llama3_2_1b", ("11512MB", 29))):
        entry = m["cells"][models[name]["cell"]]
        assert (
            (entry["memory_budget"], entry["kvcache_num_blocks"])
            == expected
            == (planned[name]["memory_budget"], planned[name]["kvcache_num_blocks"])
        )
        assert entry["produced"] == "plan" and models[name]["planned_blocks"] == entry["kvcache_num_blocks"]
    assert set(m["cells"]) == {models["qwen3_8b"]["cell"], models["llama3_2_1b"]["cell"]}
    # per-chiplet totals, recomputed from the record: reservation + each model's bytes <= available
    per = record["per_chiplet"]
    assert per["available"] == REBEL.available_per_chiplet
    totals = [per["reserved"][0][c] + sum(models[n]["usage"][0][c] for n in models) for c in range(4)]
    assert totals == per["total"][0] and max(totals) <= REBEL.available_per_chiplet
    assert per["reserved"][0] == [20 * 2**30, 0, 0, 0]
    # the counts the budgets resolve to fill chiplet 0 to within 22 MiB (docs/colocation.md)
    assert REBEL.available_per_chiplet - max(totals) == 22 * MiB

    # `explain` on each planned budget, at the model's geometry, resolves the planned count
    for name, geometry in (("qwen3_8b", ["batch_size=8", "max_seq_len=40960"]), ("llama3_2_1b", [])):
        budget = planned[name]["memory_budget"]
        proc = rbln(
            ["explain", f"model={name}", "device=rebel100", *geometry, f"budgets={budget}", "--json"],
            cwd=tmp_path,
            env=env,
        )
        check_ok(proc)
        assert [(b["budget"], b["kvcache_num_blocks"]) for b in json.loads(proc.stdout)["budgets"]] == [
            (budget, planned[name]["kvcache_num_blocks"])
        ]

    # the hand-off: one command per model, flags that agree with the artifact
    proc = rbln(["serve-command", QL, "--json", f"build_dir={build}"], cwd=tmp_path, env=env)
    check_ok(proc)
    commands = json.loads(proc.stdout)["commands"]
    assert [(c["model"], c["port"], c["env"]) for c in commands] == [
        ("qwen3_8b", 8000, {"VLLM_RBLN_USE_VLLM_MODEL": "0", "RBLN_VISIBLE_DEVICES": "0"}),
        ("llama3_2_1b", 8001, {"VLLM_RBLN_USE_VLLM_MODEL": "0", "RBLN_VISIBLE_DEVICES": "0"}),
    ]
    for c in commands:
        artifact = build / "artifacts" / c["cell"]
        check_flags(c["argv"], record_of(artifact), m["cells"][c["cell"]])
    text = rbln(["serve-command", QL, f"build_dir={build}"], cwd=tmp_path, env=env)
    check_ok(text)
    assert (
        "VLLM_RBLN_USE_VLLM_MODEL=0 RBLN_VISIBLE_DEVICES=0 vllm serve Qwen/Qwen3-8B --port 8000 --max-num-seqs 8 --max-model-len 40960 "
        "--block-size 8192 --max-num-batched-tokens 512 --dtype bfloat16" in text.stdout
    )

    # explain: one column per model
    proc = rbln(["explain", QL, f"build_dir={build}"], cwd=tmp_path, env=env)
    check_ok(proc)
    assert "  MiB        qwen3_8b  llama3_2_1b  reserved   total  available  headroom" in proc.stdout
    assert "report: cache (plan, torch)" in proc.stdout

    # nothing changed: nothing is redone, and the plan from the compile cache imports nothing heavy
    modules = tmp_path / "modules.txt"
    again = rbln([QL, f"build_dir={build}"], cwd=tmp_path, env=env, modules=modules)
    check_ok(again)
    assert "2 cells: 0 compiled, 0 finalized, 2 skipped" in again.stdout
    assert modules.read_text() == ""
    assert manifest(build) == m
    check_ok(rbln(["plan", QL, f"build_dir={build}"], cwd=tmp_path, env=env, modules=modules))
    assert modules.read_text() == ""  # planned from the compile cache
    data = json.loads(rbln(["explain", QL, "--json", f"build_dir={build}"], cwd=tmp_path, env=env).stdout)
    assert list(data["plans"]) == ["budget"] and data["plans"]["budget"]["per_chiplet"]["used"][0][0] == 35_818 * MiB


def check_flags(argv: list[str], record: dict[str, Any], entry: dict[str, Any]) -> None:
    """vllm-rbln's flags against the artifact's own record, as vllm-rbln 0.12.0 would read it."""
    flags = dict(zip(argv[5::2], argv[6::2], strict=True))  # vllm serve MODEL --port N --flag value ...
    assert int(flags["--max-num-seqs"]) == record["batch_size"]
    assert int(flags["--max-model-len"]) == record["max_seq_len"]
    assert int(flags["--block-size"]) == (record.get("kvcache_block_size") or record["kvcache_partition_len"])
    assert int(flags["--max-num-batched-tokens"]) == record["prefill_chunk_size"]
    # optimum-rbln writes num_devices only when set (None: one device)
    assert int(flags["--rbln-num-devices-per-local-rank"]) == (record.get("num_devices") or 1)
    assert flags["--dtype"] == record.get("dtype", flags["--dtype"])  # optimum-rbln's own file may not say
    assert record["kvcache_num_blocks"] == entry["kvcache_num_blocks"] == entry["serving"]["kvcache_num_blocks"]
    if entry["serving"]["precompiled"]:
        assert argv[2].endswith(f"artifacts/{entry['cell']}") and "--gpu-memory-utilization" not in flags
    else:  # compiled at start-up: the fraction resolves to the cell's budget, hence its count
        npu = resolve_npu(record["npu"])
        assert int(npu.available_bytes * float(flags["--gpu-memory-utilization"])) == entry["budget_bytes"]


def test_a_blocks_deployment_builds_explicit_counts(tmp_path: Path, env: dict[str, str]) -> None:
    build = tmp_path / "build"
    proc = rbln([QL, "deployment.mode=blocks", f"build_dir={build}"], cwd=tmp_path, env=env)
    check_ok(proc)
    record = manifest(build)["deployments"]["qwen3_8b_llama3_2_1b"]
    assert {n: (m["memory_budget"], m["kvcache_num_blocks"]) for n, m in record["models"].items()} == {
        "qwen3_8b": (None, 33),
        "llama3_2_1b": (None, 29),
    }
    assert record["models"]["qwen3_8b"]["cell"] == "qwen3_8b.rebel100.bs8.s40960.bnone.n33"
    assert record["fits"] and max(record["per_chiplet"]["total"][0]) <= REBEL.available_per_chiplet
    # the cell's own record cannot say which budget gives 33 (no report in it); the deployment's can, and
    # serve-command passes the smallest budget that resolves to each built count
    serving = manifest(build)["cells"]["qwen3_8b.rebel100.bs8.s40960.bnone.n33"]["serving"]
    assert serving["exact"] is False and "explicit kvcache_num_blocks (33) cannot be passed" in serving["notes"][-1]
    proc = rbln(["serve-command", QL, "deployment.mode=blocks", "--json", f"build_dir={build}"], cwd=tmp_path, env=env)
    check_ok(proc)
    m = manifest(build)
    for c in json.loads(proc.stdout)["commands"]:
        assert c["exact"], c["notes"]
        flags = dict(zip(c["argv"][5::2], c["argv"][6::2], strict=True))
        fraction = float(flags["--gpu-memory-utilization"])
        entry = m["cells"][c["cell"]]
        stored = json.loads((build / "cache" / "compile" / entry["compile_key"] / "entry.json").read_text())
        geometry = {"batch_size": 8, "max_seq_len": 40960} if c["model"] == "qwen3_8b" else {}
        request = Request.for_attention(
            "RBLN-CR03", 1, spec(c["model"], "RBLN-CR03", **geometry).attention, memory_budget=fraction
        )
        resolved = estimate(request, AllocationReport.from_json(stored["meta"]["report"]))
        assert (
            resolved.kvcache_num_blocks
            == entry["kvcache_num_blocks"]
            == {"qwen3_8b": 33, "llama3_2_1b": 29}[c["model"]]
        )


def test_an_infeasible_deployment_builds_nothing(tmp_path: Path, env: dict[str, str]) -> None:
    build = tmp_path / "build"
    proc = rbln(
        [QL, "deployment.reservations.0.bytes=140GB", "deployment.reservations.0.chiplet=null", f"build_dir={build}"],
        cwd=tmp_path,
        env=env,
    )
    check_ok(proc, 2)
    assert "deployment qwen3_8b_llama3_2_1b: the budget plan does not fit, so nothing was built." in proc.stderr
    assert "reservation vision_encoder: bytes 150,323,855,360 -> " in proc.stderr
    # the plan is printed as `plan` prints it, under the error's one line: each override on its own line
    assert proc.stderr.startswith("rbln-build: deployment qwen3_8b_llama3_2_1b: the budget plan does not fit")
    assert re.search(r"\n      deployment\.reservations\.0\.bytes=\d+MB\n", proc.stderr), proc.stderr
    assert not build.exists()
    # without a user cache the memory model's inventories would go to build/cache/inventory: planning
    # stages them and moves them there only when the plan fits
    tight = ["deployment=tiny_pair", "deployment.reservations.0.bytes=16800000000", f"build_dir={build}"]
    proc = rbln(tight, cwd=tmp_path)
    check_ok(proc, 2)
    assert "DOES NOT FIT" in proc.stderr and not build.exists()


def test_serve_command_before_a_build_says_how_to_build(tmp_path: Path) -> None:
    proc = rbln(["serve-command", "deployment=tiny_pair", f"build_dir={tmp_path / 'build'}"], cwd=tmp_path)
    check_ok(proc, 1)
    assert "holds no build of deployment tiny_pair; build it first: rbln-build deployment=tiny_pair" in proc.stderr


@pytest.mark.slow  # one build through the stand-in SDK (~25 s)
@needs_optimum_rbln
def test_an_rbln_deployment_builds_in_one_run_planned_from_its_compiled_reports(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # The stand-in compiler (tests/fakes) reports other sizes than the memory model. The build compiles
    # the two models first, plans from their compiled reports, then finalizes the planned cells: one
    # run, every count as planned, and nothing compiled twice.
    build = tmp_path / "build"
    rbln_env = dict(env, PYTHONPATH=f"{FAKES}:{os.environ.get('PYTHONPATH', '')}")
    args = ["deployment=tiny_pair", "matrix.backend=rbln", f"build_dir={build}"]
    memory_model = plan_json(["deployment=tiny_pair"], tmp_path, env)["plans"]["budget"]["models"]
    first = rbln(args, cwd=tmp_path, env=rbln_env)
    check_ok(first)
    assert "[plan 1/2] tiny_llama for RBLN-CA25 x1 (rbln): compiled" in first.stdout
    assert "[plan 2/2] tiny_qwen3 for RBLN-CA25 x1 (rbln): compiled" in first.stdout
    assert "2 cells: 0 compiled, 2 finalized" in first.stdout  # the compiles ran once, for the plan
    m = manifest(build)
    record = m["deployments"]["tiny_pair"]
    assert record["status"] == "ok" and record["fits"] and record["problems"] == []
    assert all(v["kvcache_num_blocks"] == v["planned_blocks"] for v in record["models"].values())
    planned = plan_json(args, tmp_path, rbln_env)
    assert [x["report"] for x in planned["models"]] == ["cache (rbln, rbln)", "cache (rbln, rbln)"]
    budgets = {n: v["memory_budget"] for n, v in planned["plans"]["budget"]["models"].items()}
    assert budgets == {n: v["memory_budget"] for n, v in record["models"].items()}
    assert budgets != {n: v["memory_budget"] for n, v in memory_model.items()}  # the compiled reports decided
    again = rbln(args, cwd=tmp_path, env=rbln_env)
    check_ok(again)
    assert "[plan" not in again.stdout and "2 cells: 0 compiled, 0 finalized, 2 skipped" in again.stdout
    # both are compiled models, but the tiny recipes carry no tokenizer and name no hub model to take one
    # from (their source.model_id is made up): no command, the reason instead
    for entry in m["cells"].values():
        assert entry["serving"]["precompiled"] and "carries no tokenizer" in entry["serving"]["refused"]
    proc = rbln(["serve-command", *args, "--json"], cwd=tmp_path, env=rbln_env)
    check_ok(proc, 2)
    assert "no serve command" in proc.stderr and "names no hub model" in proc.stderr and "vllm serve" not in proc.stderr


@pytest.mark.slow  # two compiles through the stand-in SDK (~15 s)
@needs_optimum_rbln
def test_an_infeasible_rbln_deployment_keeps_only_the_compiles_it_planned_from(tmp_path: Path) -> None:
    # With the rbln backend the plan needs the compiled reports, so the compiles stay in cache/compile
    # (keyed by the models' compile inputs); nothing else is written: no manifest, no artifacts, no
    # inventories (the suggestions' other targets use the memory model: staged, then discarded). The
    # printed fix, applied as printed, reuses those compiles.
    build = tmp_path / "build"
    rbln_env = {"PYTHONPATH": f"{FAKES}:{os.environ.get('PYTHONPATH', '')}"}
    # the stand-in's reports: tiny_qwen3's floor needs 31.20 MiB; leave 30 MiB
    args = [
        "deployment=tiny_pair",
        "matrix.backend=rbln",
        f"deployment.reservations.0.bytes={ATOM.available_bytes - 30 * MiB}",
        f"build_dir={build}",
    ]
    proc = rbln(args, cwd=tmp_path, env=rbln_env)
    check_ok(proc, 2)
    lines = proc.stderr.splitlines()
    assert any(line.startswith("rbln-build: deployment tiny_pair: the budget plan does not fit") for line in lines)
    assert "\n  tiny_qwen3 cannot reach its floor of 9 blocks on atom_max even alone" in proc.stderr
    written = sorted(str(p.relative_to(build)) for p in build.rglob("*") if "/files/" not in str(p.relative_to(build)))
    assert [p for p in written if not p.startswith("cache/compile/")] == ["cache", "cache/compile"], written
    assert len(list((build / "cache" / "compile").iterdir())) == 2
    fix = next(
        line.strip() for line in proc.stderr.splitlines() if line.startswith("      deployment.reservations.0.bytes=")
    )
    again = rbln([*args, fix], cwd=tmp_path, env=rbln_env)
    check_ok(again)
    assert "[plan" not in again.stdout and "2 cells: 0 compiled, 2 finalized" in again.stdout


@pytest.mark.slow  # two torch exports (~10 s) and a CPU prefill
def test_built_tiny_deployment_fits_per_chiplet_and_each_pool_holds_its_planned_count(
    tmp_path: Path, env: dict[str, str]
) -> None:
    from rbln_build.backends.torch._runtime import load_artifact
    from rbln_build.errors import RuntimeLimitError
    from rbln_build.estimator import AllocationReport, kv_bytes_at

    build = tmp_path / "build"
    check_ok(rbln(["deployment=tiny_pair", f"build_dir={build}"], cwd=tmp_path, env=env))
    m = manifest(build)
    record = m["deployments"]["tiny_pair"]
    assert {n: v["kvcache_num_blocks"] for n, v in record["models"].items()} == {"tiny_llama": 6, "tiny_qwen3": 16}
    # the sum of the built reports (the compile entries the cells were resized from), at the built
    # counts, plus the reservation, fits the one chiplet
    total = 16_640_901_120
    for _name, v in record["models"].items():
        entry = m["cells"][v["cell"]]
        stored = json.loads((build / "cache" / "compile" / entry["compile_key"] / "entry.json").read_text())
        report = AllocationReport.from_json(stored["meta"]["report"])
        total += report.non_kv_per_chiplet()[(0, 0)] + kv_bytes_at(report, v["kvcache_num_blocks"])[(0, 0)]
    assert total == record["per_chiplet"]["total"][0][0] <= ATOM.available_per_chiplet
    assert total == ATOM.available_per_chiplet  # 86 + 140 MiB fill the 226 MiB left exactly
    # each artifact's pool holds exactly its planned count; tiny_llama's (6 of 8 blocks: 2 x 3 blocks
    # of 1024 tokens) serves a request that needs all of it and refuses one that needs one block more
    for _name, v in record["models"].items():
        assert load_artifact(build / "artifacts" / v["cell"]).num_blocks == v["planned_blocks"]
    llama = load_artifact(build / "artifacts" / record["models"]["tiny_llama"]["cell"])
    with pytest.raises(RuntimeLimitError, match="needs 7 KV-cache blocks"):
        llama.check_request([[1] * 3073, [1] * 3071], 1)  # 3073 positions need 4 blocks
    out = llama.generate([[1] * 3071, [2] * 3071], 2)  # 3072 positions each: 3 blocks each
    assert [len(o) for o in out] == [2, 2]


def test_a_deployment_build_keeps_the_matrix_cells_in_the_manifest(tmp_path: Path, env: dict[str, str]) -> None:
    """A new user's puzzle (issue 36): a deployment build in a build dir that holds the matrix's build
    replaced the manifest with the deployment's cells, so status then said every matrix cell would
    finalize. The matrix is the deployment's declared one: its cells stay listed (as after a narrowed
    build), status of the matrix says they are up to date, and the deployment's cells are listed too."""
    build = [f"build_dir={tmp_path / 'build'}", "matrix=plans"]
    check_ok(rbln(build, cwd=tmp_path, env=env))
    matrix_cells = manifest(tmp_path / "build")["cells"]
    check_ok(rbln([QL, *build], cwd=tmp_path, env=env))
    after = manifest(tmp_path / "build")
    assert {c: after["cells"][c] for c in matrix_cells} == matrix_cells
    assert len(after["cells"]) > len(matrix_cells) and QL.split("=")[1] in after["deployments"]
    proc = rbln(["status", "--json", *build], cwd=tmp_path, env=env)
    check_ok(proc, 1)
    status = json.loads(proc.stdout)
    assert {c["state"] for c in status["cells"]} == {"up to date"}  # the deployment's cells: not in the matrix
    assert sorted(status["removed"]) == sorted(set(after["cells"]) - set(matrix_cells))
