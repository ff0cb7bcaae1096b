"""Servers of two cards, end to end: a deployment's models placed by the server planner
(``rbln_build.colocation.server_plan_for``), each card built as a deployment of its own
(``card_overrides``) through the real CLI with the torch backend, each cell's count equal to the
server plan, and each model's serve command pinned to its card (``RBLN_VISIBLE_DEVICES``).

The tiny pair builds real CPU programs; vllm-rbln cannot serve them (synthetic recipes, no hub model:
``serve-command`` refuses them, tests/test_serving.py), so the serve commands are checked on Qwen3-8B
and Llama-3.2-1B, whose cells are plans served by compiling at start-up."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli import check_ok, manifest, rbln
from test_deploy_cli import env  # noqa: F401  (the fixture: the models' inventories, copied once)

MiB = 2**20
# 16,877,879,296 B available on an ATOM-Max chiplet: leave 150 MiB. tiny_llama takes 94 MiB at its full
# 8 blocks and tiny_qwen3 140 MiB at its full 16: together they do not fit one card, each fits one alone.
LEAVE_150 = f"deployment.reservations.0.bytes={16_877_879_296 - 150 * MiB}"


def build_cards(
    args: list[str], tmp_path: Path, environ: dict[str, str], monkeypatch: pytest.MonkeyPatch, serve: bool
) -> dict[str, int]:
    """Plan ``args`` on two cards, build each card, check its counts (and serve commands); the placement."""
    from rbln_build.colocation import card_overrides, server_plan_for
    from rbln_build.config._config import compose_settings

    monkeypatch.setenv("RBLN_BUILD_CACHE", environ["RBLN_BUILD_CACHE"])
    settings = compose_settings([*args, f"build_dir={tmp_path / 'plan'}"])
    deployment = settings.deployment
    assert deployment is not None
    plan = server_plan_for(settings, 2)
    assert plan.feasible and plan.proof.optimal
    cards = card_overrides(deployment, plan)
    assert sorted(k for k, _ in cards) == sorted(set(dict(plan.placement).values()))
    for k, overrides in cards:
        build = tmp_path / f"card{k}"
        check_ok(rbln([*args, *overrides, f"build_dir={build}"], cwd=tmp_path, env=environ))
        record = manifest(build)["deployments"][deployment.name]
        names = [a.name for a in plan.cards[k].assignments]
        assert record["fits"] and record["status"] == "ok" and record["serve"]["device_ids"] == [k]
        assert {n: v["kvcache_num_blocks"] for n, v in record["models"].items()} == {n: plan.counts()[n] for n in names}
        if not serve:
            continue
        proc = rbln(["serve-command", *args, *overrides, f"build_dir={build}"], cwd=tmp_path, env=environ)
        check_ok(proc)
        commands = [line for line in proc.stdout.splitlines() if " vllm serve " in line]
        assert len(commands) == len(names)
        for name, command in zip(names, commands, strict=True):
            assert command.startswith(f"VLLM_RBLN_USE_VLLM_MODEL=0 RBLN_VISIBLE_DEVICES={k} vllm serve ")
            assert f" --port {deployment.model(name).port} " in command
    return dict(plan.placement)


@pytest.mark.slow  # two torch exports (~10 s) and the inventories
def test_a_two_card_server_of_the_tiny_pair_builds_each_card_at_the_planned_counts(
    tmp_path: Path,
    env: dict[str, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    placement = build_cards(["deployment=tiny_pair", LEAVE_150], tmp_path, env, monkeypatch, serve=False)
    assert placement == {"tiny_llama": 0, "tiny_qwen3": 1}


def test_qwen3_8b_and_llama3_2_1b_on_two_rebel100_cards_are_served_each_on_its_card(
    tmp_path: Path,
    env: dict[str, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # on one card they get 33 of 40 and 29 of 32 blocks (docs/colocation.md); on two, each its full pool
    placement = build_cards(["deployment=qwen3_8b_llama3_2_1b"], tmp_path, env, monkeypatch, serve=True)
    assert placement == {"qwen3_8b": 0, "llama3_2_1b": 1}
