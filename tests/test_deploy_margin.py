"""Margins: bytes held back on every chiplet in every fit check of a deployment (docs/colocation.md,
"Margins"). Hand-computed plans on the tiny recipes (their per-chiplet bytes are listed in
tests/test_deploy_planner.py), the brute-force oracle with the margin charged like a reservation,
and the config's validation of every bad value."""

from __future__ import annotations

from fractions import Fraction

import pytest
from deploy_oracle import best, need, reserved
from omegaconf import OmegaConf
from test_deploy_planner import ATOM, counts, leave, tiny

from rbln_build.config._config import compose_settings
from rbln_build.config._deployment import deployment_from_config
from rbln_build.deploy import BLOCKS, BUDGET, Margin, Margins, Target, plan_deployment, plan_json, render_plan
from rbln_build.errors import ConfigError

MiB = 2**20


def test_a_margin_is_held_back_like_room_that_is_not_there() -> None:
    # 226 MiB left by the reservation: (6, 16) fits with 0 MiB of headroom. A 4 MiB margin leaves 222,
    # where (8, 12) is the optimum (tests/test_deploy_planner.py, "222MiB"), with 0 headroom after it.
    tenants = [tiny("tiny_llama", ATOM), tiny("tiny_qwen3", ATOM)]
    reservations = [leave(ATOM, 226)]
    plan = plan_deployment(ATOM, tenants, reservations, margins=Margins(Margin(4 * MiB)))
    assert counts(plan.budget) == counts(plan.blocks) == {"tiny_llama": 8, "tiny_qwen3": 12}
    for mode in (BUDGET, BLOCKS):
        assert best(ATOM, tenants, reservations, mode, margin=[4 * MiB]) == {"tiny_llama": 8, "tiny_qwen3": 12}
    assert plan.budget.held() == (4 * MiB,) and plan.budget.headroom() == (0,)
    assert sum(plan.budget.used()) + 4 * MiB == ATOM.available_per_chiplet
    text = render_plan(plan, "x")
    assert "margin: 4,194,304 B per chiplet, held back on every chiplet in every fit check" in text
    assert "  MiB        tiny_llama  tiny_qwen3  reserved   total  margin  available  headroom" in text
    data = plan_json(plan, "x")
    assert data["margin"] == {"deployment": {"bytes": 4 * MiB, "fraction": 0.0}, "devices": {}}
    assert data["plans"]["budget"]["per_chiplet"]["margin"] == [[4 * MiB]]


def test_without_a_margin_nothing_is_shown_or_changed() -> None:
    tenants = [tiny("tiny_llama", ATOM), tiny("tiny_qwen3", ATOM)]
    plan = plan_deployment(ATOM, tenants, [leave(ATOM, 226)])
    assert counts(plan.budget) == {"tiny_llama": 6, "tiny_qwen3": 16}
    text = render_plan(plan, "x")
    assert "margin" not in text


def test_a_fractional_margin_rounds_up_and_names_itself_in_a_conflict() -> None:
    # 1/100 of 16,096 MiB is 160.96 MiB, rounded up to a byte: the floors (214 MiB) no longer fit 226 MiB.
    tenants = [tiny("tiny_llama", ATOM), tiny("tiny_qwen3", ATOM)]
    margins = Margins(Margin(fraction=Fraction(1, 100)))
    held = -(-ATOM.available_per_chiplet // 100)
    plan = plan_deployment(ATOM, tenants, [leave(ATOM, 226 + 161)], margins=margins)
    assert plan.budget.held() == (held,)
    assert best(ATOM, tenants, [leave(ATOM, 226 + 161)], BUDGET, margin=[held]) == counts(plan.budget)
    tight = plan_deployment(ATOM, tenants, [leave(ATOM, 226)], margins=margins)
    assert not tight.feasible
    assert "MiB left by the reservations and the margin" in tight.chosen.reason
    # every suggestion holds the margin too: its plan's headroom is measured after it
    assert tight.suggestions and all(min(s.plan.headroom()) >= 0 for s in tight.suggestions)
    assert all(s.plan.held() == (held,) for s in tight.suggestions if s.kind != "margin")
    lowered = next(s for s in tight.suggestions if s.kind == "margin")  # the floors leave 12 MiB of 226
    assert (lowered.old, lowered.new) == (held, 12 * MiB) and lowered.plan.held() == (12 * MiB,)


def test_a_device_margin_replaces_the_deployments_on_that_device() -> None:
    target = Target("atom_max_x2", ATOM.npu, 2)
    tenants = [tiny("tiny_llama", target), tiny("tiny_qwen3", target)]
    margins = Margins(Margin(2 * MiB), ((1, Margin(40 * MiB)),))
    plan = plan_deployment(target, tenants, [leave(target, 260)], margins=margins)
    assert plan.budget.held() == (2 * MiB, 40 * MiB)
    margin = [2 * MiB, 40 * MiB]
    for mp in (plan.budget, plan.blocks):
        assert counts(mp) == best(target, tenants, [leave(target, 260)], mp.mode, margin=margin)
        occupied = [need(target, plan.tenant(a.name), a.kvcache_num_blocks) for a in mp.assignments]
        totals = [sum(c) for c in zip(reserved(target, [leave(target, 260)]), margin, *occupied, strict=True)]
        assert max(totals) <= target.available_per_chiplet
    assert "device 1: 41,943,040 B per chiplet" in render_plan(plan, "x")


def test_overrides_set_the_margins() -> None:
    d = compose_settings(
        ["deployment=tiny_pair", "deployment.margin=512MB", "deployment.device_margins=[0.02]"]
    ).deployment
    assert d.margins == Margins(Margin(512 * MiB), ((0, Margin(fraction=Fraction(1, 50))),))
    assert compose_settings(["deployment=tiny_pair"]).deployment.margins == Margins()


def _node(**changes: object) -> dict:
    node = {"device": "atom_max", "models": [{"model": "tiny_llama"}, {"model": "tiny_qwen3"}]}
    node.update(changes)
    return node


@pytest.mark.parametrize(
    ("node", "message"),
    [
        pytest.param(
            _node(margin="half"), "deployment.margin: expected a margin per chiplet, bytes (an int", id="word"
        ),
        pytest.param(_node(margin=-5), "deployment.margin: expected a margin per chiplet", id="negative-bytes"),
        pytest.param(_node(margin=1.5), "deployment.margin: a fraction of a chiplet must be at least 0", id="above-1"),
        pytest.param(_node(margin=-0.1), "deployment.margin: a fraction of a chiplet must be", id="negative-fraction"),
        pytest.param(_node(margin="16GB"), "deployment.margin: '16GB' holds back 17,179,869,184 B", id="all-of-it"),
        pytest.param(_node(margin=[1]), "deployment.margin: expected a margin per chiplet", id="list"),
        pytest.param(
            _node(device_margins=[None, None]),
            "deployment.device_margins (x): expected one entry per device of atom_max (num_devices 1",
            id="device-count",
        ),
        pytest.param(
            _node(device_margins=["4 GiB"]), "deployment.device_margins[0]: expected a margin per chiplet", id="device"
        ),
    ],
)
def test_each_bad_margin_is_one_clear_error(node: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        deployment_from_config("x", OmegaConf.create(node))
    assert message in str(info.value)
    assert str(info.value).count("deployment.") == 1  # one error, about that one key


def test_a_margin_that_does_not_fit_gets_the_largest_that_does_applied_as_printed(tmp_path) -> None:
    # tiny_pair leaves 226 MiB; the floors need 214, so a 20 MiB margin does not fit and 12 MiB does
    # (with 0 headroom): the change gives up 8/20 of the margin. Applied as printed, it plans the same.
    from rbln_build.colocation import overrides_for, plan_for

    base = ["deployment=tiny_pair", "deployment.margin=20MB", f"build_dir={tmp_path}"]
    settings = compose_settings(base)
    plan = plan_for(settings)
    assert not plan.feasible
    lowered = next(s for s in plan.suggestions if s.kind == "margin")
    assert (lowered.old, lowered.new, lowered.given_up) == (20 * MiB, 12 * MiB, Fraction(2, 5))
    assert lowered.describe() == "margin: 20,971,520 -> 12,582,912 bytes per chiplet (the largest whole MiB that fits)"
    assert counts(lowered.plan) == {"tiny_llama": 6, "tiny_qwen3": 12} and lowered.plan.headroom() == (0,)
    printed = overrides_for(settings.deployment)(lowered)
    assert printed == ["deployment.margin=12MB"]
    again = plan_for(compose_settings([*base, *printed]))
    assert again.feasible and counts(again.chosen) == counts(lowered.plan)
    # one MiB more does not fit
    assert not plan_for(compose_settings([*base, "deployment.margin=13MB"])).feasible
