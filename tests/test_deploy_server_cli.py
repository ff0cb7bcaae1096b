"""Servers of two cards, end to end through the real CLI: ``plan --cards 2`` places a deployment's
models, each card is built with the overrides the plan prints for it (the torch backend), each cell's
count equals the server plan, and each model's serve command is pinned to its card
(``RBLN_VISIBLE_DEVICES``); and the command's answers to what cannot fit or is mistyped. A deployment
with a ``server`` key is planned by ``plan`` alone and built in one run (every card's cells in one
build directory, one record per card), and ``serve-command`` starts each model on its card.

The tiny pair builds real CPU programs; vllm-rbln cannot serve them (synthetic recipes, no hub model:
``serve-command`` refuses them, tests/test_serving.py), so the serve commands are checked here on Qwen3-8B
and Llama-3.2-1B, whose cells are plans served by compiling at start-up. The tiny pair's server with the
rbln backend, served from its compiled cells with a trained tokenizer, and a card whose cell fails, are in
tests/test_deploy_server_e2e.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_cli import check_ok, manifest, rbln
from test_deploy_cli import QL, env  # noqa: F401  (the fixture: the models' inventories, copied once)

MiB = 2**20
# 16,877,879,296 B available on an ATOM-Max chiplet: leave 150 MiB. tiny_llama takes 94 MiB at its full
# 8 blocks and tiny_qwen3 140 MiB at its full 16: together they do not fit one card, each fits one alone.
LEAVE_150 = f"deployment.reservations.0.bytes={16_877_879_296 - 150 * MiB}"


def build_cards(args: list[str], tmp_path: Path, environ: dict[str, str], serve: bool) -> dict[str, int]:
    """Plan ``args`` on two cards (``plan --cards 2 --json``), then build each card with the overrides the
    plan prints for it, check its counts (and serve commands); the placement."""
    proc = rbln(["plan", *args, "--cards", "2", "--json", f"build_dir={tmp_path / 'build'}"], cwd=tmp_path, env=environ)
    check_ok(proc)
    plan = json.loads(proc.stdout)
    assert plan["feasible"] and plan["proof"]["optimal"]
    name = args[0].split("=", 1)[1]
    for card in plan["per_card"]:
        k, overrides, models = card["card"], card["overrides"], card["models"]
        assert card["device_ids"] == [k] and (overrides == []) == (models == {})
        if not models:
            continue
        assert overrides[-1] == f"build_dir={tmp_path / 'build'}/card{k}"
        check_ok(rbln([*args, *overrides], cwd=tmp_path, env=environ))
        record = manifest(tmp_path / "build" / f"card{k}")["deployments"][name]
        assert record["fits"] and record["status"] == "ok" and record["serve"]["device_ids"] == [k]
        assert {n: v["kvcache_num_blocks"] for n, v in record["models"].items()} == {
            n: m["kvcache_num_blocks"] for n, m in models.items()
        }
        if not serve:
            continue
        proc = rbln(["serve-command", *args, *overrides], cwd=tmp_path, env=environ)
        check_ok(proc)
        commands = [line for line in proc.stdout.splitlines() if " vllm serve " in line]
        assert len(commands) == len(models)
        for model, command in zip(models, commands, strict=True):
            assert command.startswith(f"VLLM_RBLN_USE_VLLM_MODEL=0 RBLN_VISIBLE_DEVICES={k} vllm serve ")
            assert f" --port {record['models'][model]['port']} " in command
    return plan["placement"]  # type: ignore[no-any-return]


@pytest.mark.slow  # two torch exports (~10 s) and the inventories
def test_a_two_card_server_of_the_tiny_pair_builds_each_card_at_the_planned_counts(
    tmp_path: Path,
    env: dict[str, str],  # noqa: F811
) -> None:
    placement = build_cards(["deployment=tiny_pair", LEAVE_150], tmp_path, env, serve=False)
    assert placement == {"tiny_llama": 0, "tiny_qwen3": 1}


def test_qwen3_8b_and_llama3_2_1b_on_two_rebel100_cards_are_served_each_on_its_card(
    tmp_path: Path,
    env: dict[str, str],  # noqa: F811
) -> None:
    # on one card they get 33 of 40 and 29 of 32 blocks (docs/colocation.md); on two, each its full pool
    placement = build_cards(["deployment=qwen3_8b_llama3_2_1b"], tmp_path, env, serve=True)
    assert placement == {"qwen3_8b": 0, "llama3_2_1b": 1}


def test_plan_cards_prints_each_card_with_its_commands(tmp_path: Path, env: dict[str, str]) -> None:  # noqa: F811
    proc = rbln(["plan", "deployment=tiny_pair", LEAVE_150, "--cards", "2", "build_dir=out"], cwd=tmp_path, env=env)
    check_ok(proc)
    assert "deployment tiny_pair on a server of 2 x atom_max (1 x RBLN-CA25 each), mode budget" in proc.stdout
    assert "proven optimal; smallest share 1.0000, 24 blocks in total" in proc.stdout
    assert "card 0 (devices 0): tiny_llama 8/8 blocks (memory_budget 94MB)" in proc.stdout
    assert "card 1 (devices 1): tiny_qwen3 16/16 blocks (memory_budget 140MB)" in proc.stdout
    assert (
        f"  build: rbln-build deployment=tiny_pair {LEAVE_150} deployment.mode=budget "
        "'deployment.models=[{model:tiny_qwen3,memory_budget:140MB,port:8101}]' 'deployment.serve.device_ids=[1]' "
        "build_dir=out/card1"
    ) in proc.stdout
    # one card of 150 MiB cannot hold both floors (86 + 128 MiB); the verdict names the cards that can
    one = rbln(["plan", "deployment=tiny_pair", LEAVE_150, "--cards", "1"], cwd=tmp_path, env=env)
    check_ok(one, 1)
    assert (
        "the budget plan does not fit: no placement of the 2 model(s), each at its lower bound, fits the server's 1 "
        "card(s) together, though each fits a card alone; they fit on 2 cards (the added ones like card 0)\n"
        f"  rbln-build plan deployment=tiny_pair {LEAVE_150} --cards 2\n"
    ) in one.stdout
    pinned = rbln(
        ["plan", "deployment=tiny_pair", LEAVE_150, "--cards", "3", "--pin", "tiny_llama=2", "--json"],
        cwd=tmp_path,
        env=env,
    )
    check_ok(pinned)
    assert json.loads(pinned.stdout)["placement"] == {"tiny_llama": 2, "tiny_qwen3": 0}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--cards", "two"], 2, "plan --cards: expected a whole number of cards >= 1, got 'two'"),
        (["--pin", "tiny_llama=1"], 2, "plan --pin: pins a model to a card of a server; give the server's --cards too"),
        (["--cards", "2", "--pin", "tiny_llama=5"], 2, "deployment.server.pins.tiny_llama: card 5 does not exist"),
        (
            ["--cards", "2", f"deployment.reservations.0.bytes={16_877_879_296 - 90 * MiB}"],
            1,
            "the budget plan does not fit: tiny_qwen3 at 9 blocks (its floor) fits no card it may use even alone: "
            "39,845,888 B short on card 0",
        ),
    ],
)
def test_plan_cards_errors(args: list[str], code: int, message: str, tmp_path: Path, env: dict[str, str]) -> None:  # noqa: F811
    proc = rbln(["plan", "deployment=tiny_pair", *args], cwd=tmp_path, env=env)
    assert proc.returncode == code, proc.stderr
    assert message in proc.stdout + proc.stderr


SERVER = "deployment.server={cards:2}"


def plan_of(args: list[str], tmp_path: Path, environ: dict[str, str]) -> dict[str, Any]:
    proc = rbln(["plan", *args, "--json", f"build_dir={tmp_path / 'build'}"], cwd=tmp_path, env=environ)
    check_ok(proc)
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def build_server(args: list[str], tmp_path: Path, environ: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Plan the server of ``args`` (its ``server`` key), build it in ONE run, check every card's record
    against the plan: (the plan, the deployment's record)."""
    plan = plan_of(args, tmp_path, environ)
    assert plan["feasible"] and plan["proof"]["optimal"]
    check_ok(rbln([*args, f"build_dir={tmp_path / 'build'}"], cwd=tmp_path, env=environ))
    name = args[0].split("=", 1)[1]
    record = manifest(tmp_path / "build")["deployments"][name]
    assert record["fits"] and record["status"] == "ok" and record["server"]["placement"] == plan["placement"]
    cards = [c for c in plan["per_card"] if c["models"]]
    assert [c["card"] for c in record["cards"]] == [c["card"] for c in cards]
    for built, planned in zip(record["cards"], cards, strict=True):
        assert built["serve"]["device_ids"] == planned["device_ids"] and built["fits"]
        # each cell's count is the server plan's, and its budget the planned one
        assert {n: (m["kvcache_num_blocks"], m["memory_budget"]) for n, m in built["models"].items()} == {
            n: (m["kvcache_num_blocks"], m["memory_budget"]) for n, m in planned["models"].items()
        }
    assert {n: m["card"] for n, m in record["models"].items()} == plan["placement"]
    return plan, record


@pytest.mark.slow  # two torch exports (~40 s on a busy machine) and the inventories
def test_a_server_deployment_of_the_tiny_pair_builds_every_card_in_one_run(
    tmp_path: Path,
    env: dict[str, str],  # noqa: F811
) -> None:
    args = ["deployment=tiny_pair", LEAVE_150, SERVER]
    plan, record = build_server(args, tmp_path, env)
    assert plan["placement"] == {"tiny_llama": 0, "tiny_qwen3": 1}
    assert {n: m["kvcache_num_blocks"] for n, m in record["models"].items()} == {"tiny_llama": 8, "tiny_qwen3": 16}
    cells = manifest(tmp_path / "build")["cells"]
    for m in record["models"].values():  # real CPU programs, at the planned counts
        assert cells[m["cell"]]["status"] == "ok" and cells[m["cell"]]["kvcache_num_blocks"] == m["planned_blocks"]
    again = rbln([*args, f"build_dir={tmp_path / 'build'}", "progress=false"], cwd=tmp_path, env=env)
    check_ok(again)
    assert "0 compiled, 0 finalized, 2 skipped, 0 failed" in again.stdout  # a second run is a no-op


def test_a_server_deployment_of_qwen3_8b_and_llama3_2_1b_builds_in_one_run_and_serves_each_on_its_card(
    tmp_path: Path,
    env: dict[str, str],  # noqa: F811
) -> None:
    # pinned both to card 1 of three, they share it at their one-card plan (33 and 29 blocks); the others are empty
    args = [QL, "deployment.server={cards:3,pins:{qwen3_8b:1,llama3_2_1b:1}}", "deployment.serve.device_ids=[4,5,6]"]
    plan, record = build_server(args, tmp_path, env)
    assert plan["placement"] == {"qwen3_8b": 1, "llama3_2_1b": 1}
    assert {n: m["kvcache_num_blocks"] for n, m in record["models"].items()} == {"qwen3_8b": 33, "llama3_2_1b": 29}
    assert record["cards"][0]["serve"]["device_ids"] == [5]
    # two cards, nothing pinned: each its full pool on a card of its own
    args = [QL, SERVER]
    plan, record = build_server(args, tmp_path, env)
    assert plan["placement"] == {"qwen3_8b": 0, "llama3_2_1b": 1}
    proc = rbln(["serve-command", *args, f"build_dir={tmp_path / 'build'}"], cwd=tmp_path, env=env)
    check_ok(proc)
    commands = [line for line in proc.stdout.splitlines() if " vllm serve " in line]
    assert len(commands) == 2
    for model, command in zip(["qwen3_8b", "llama3_2_1b"], commands, strict=True):  # the deployment's order
        card = plan["placement"][model]
        assert command.startswith(f"VLLM_RBLN_USE_VLLM_MODEL=0 RBLN_VISIBLE_DEVICES={card} vllm serve ")
        assert f" --port {record['models'][model]['port']} " in command
    assert "# qwen3_8b: cell qwen3_8b.rebel100.bs8.s40960.b" in proc.stdout and ", card 0 (devices 0)" in proc.stdout
    # mode blocks builds each model at its planned explicit count, in one run too
    plan, record = build_server([QL, SERVER, "deployment.mode=blocks"], tmp_path, env)
    assert {n: m["kvcache_num_blocks"] for n, m in record["models"].items()} == {"qwen3_8b": 40, "llama3_2_1b": 32}
    assert {n: m["cell"] for n, m in record["models"].items()} == {
        "qwen3_8b": "qwen3_8b.rebel100.bs8.s40960.bnone.n40",
        "llama3_2_1b": "llama3_2_1b.rebel100.bnone.n32",
    }
    explain = rbln(["explain", QL, SERVER], cwd=tmp_path, env=env)
    check_ok(explain, 2)
    assert "it is a server of 2 card(s); `rbln-build plan` prints each card's table" in explain.stderr
    # the build without the server key is another deployment: serve-command says to build it again
    plain = rbln(["serve-command", QL, f"build_dir={tmp_path / 'build'}"], cwd=tmp_path, env=env)
    check_ok(plain, 1)
    assert "built as a server, which its config no longer names; build it again" in plain.stderr


def test_plan_of_a_server_key_prints_the_one_run_build(tmp_path: Path, env: dict[str, str]) -> None:  # noqa: F811
    proc = rbln(["plan", "deployment=tiny_pair", LEAVE_150, SERVER, "build_dir=out"], cwd=tmp_path, env=env)
    check_ok(proc)
    assert "card 1 (devices 1): tiny_qwen3 16/16 blocks (memory_budget 140MB)" in proc.stdout
    assert "  build: " not in proc.stdout  # no per-card commands: one run builds them all
    assert (
        f"build (every card, in one run): rbln-build deployment=tiny_pair {LEAVE_150} '{SERVER}' build_dir=out\n"
    ) in proc.stdout
    # the flags and the key plan the same server; --cards replaces the key's cards, --pin adds a pin
    same = plan_of(["deployment=tiny_pair", LEAVE_150, "--cards", "2"], tmp_path, env)
    keyed = plan_of(["deployment=tiny_pair", LEAVE_150, SERVER], tmp_path, env)
    assert same["placement"] == keyed["placement"] == {"tiny_llama": 0, "tiny_qwen3": 1}
    moved = plan_of(["deployment=tiny_pair", LEAVE_150, SERVER, "--cards", "3", "--pin", "tiny_llama=2"], tmp_path, env)
    assert moved["placement"] == {"tiny_llama": 2, "tiny_qwen3": 0} and moved["cards"] == 3
    # per-card overrides of a configured server drop the key, so each card builds as a deployment of its own
    assert moved["per_card"][2]["overrides"][0] == "deployment.server=null"


def test_a_server_that_does_not_fit_builds_nothing(tmp_path: Path, env: dict[str, str]) -> None:  # noqa: F811
    build = tmp_path / "build"
    proc = rbln(
        ["deployment=tiny_pair", LEAVE_150, "deployment.server={cards:1}", f"build_dir={build}"], cwd=tmp_path, env=env
    )
    check_ok(proc, 2)
    assert (
        "deployment tiny_pair: the budget plan of its server of 1 card(s) does not fit, so nothing was built: no "
        "placement of the 2 model(s)"
    ) in proc.stderr
    assert "they fit on 2 cards" in proc.stderr and not build.exists()


def test_a_card_whose_link_cannot_be_written_is_a_problem_of_its_card_in_the_record(
    tmp_path: Path,
    env: dict[str, str],  # noqa: F811
) -> None:
    # a cell built whose link fails is a failed cell (pipeline/_publish.py): the deployment's record says so
    # too, rather than calling the card ok; the other card's cell, link and record are kept
    build, llama = tmp_path / "build", "llama3_2_1b.rebel100.b12280MB"
    (build / "artifacts" / llama).mkdir(parents=True)
    (build / "artifacts" / llama / "mine").write_text("a user's file where the link goes")
    args = [QL, SERVER, f"build_dir={build}", "progress=false"]
    first = rbln(args, cwd=tmp_path, env=env)
    check_ok(first, 1)
    # the manifest was written (only a link failed): the message says it names the cell failed, and the
    # deployment's summary line is printed as on any run
    assert "The manifest there names those cells as failed" in first.stderr
    assert "deployment qwen3_8b_llama3_2_1b (budget, a server of 2 card(s))" in first.stdout
    m = manifest(build)
    record = m["deployments"]["qwen3_8b_llama3_2_1b"]
    assert m["cells"][llama]["error_kind"] == "output_failed" and record["status"] == "failed"
    assert [c["status"] for c in record["cards"]] == ["ok", "failed"]
    assert record["problems"] == [f"card 1: cell {llama} did not build: {m['cells'][llama]['error']}"]
    qwen = record["models"]["qwen3_8b"]["cell"]
    assert m["cells"][qwen]["status"] == "ok" and (build / "artifacts" / qwen).is_symlink()
    shutil.rmtree(build / "artifacts" / llama)  # moved out of the way: the next run links it, builds nothing
    again = rbln(args, cwd=tmp_path, env=env)
    check_ok(again)
    assert "0 compiled, 0 finalized, 2 skipped, 0 failed" in again.stdout
    assert manifest(build)["deployments"]["qwen3_8b_llama3_2_1b"]["status"] == "ok"
