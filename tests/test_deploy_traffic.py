"""Traffic: a model's concurrent sequences (or requests/s x seconds per request) and tokens per
sequence become the blocks it needs, met before the rest is shared; a deployment that cannot meet them
is infeasible, naming the model and the shortfall. The tiny recipes' bytes are listed in
tests/test_deploy_planner.py (on one RBLN-CA25: tiny_llama 86 MiB at 5-6 blocks, 94 at 7-8;
tiny_qwen3 128 MiB at 9-12, 140 at 13-16)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest
from deploy_oracle import best
from omegaconf import OmegaConf
from test_deploy_planner import ATOM, counts, leave, tiny

from rbln_build.config._config import compose_settings
from rbln_build.config._deployment import deployment_from_config
from rbln_build.deploy import BUDGET, Problem, Traffic, plan_deployment, plan_json, render_plan
from rbln_build.errors import ConfigError


def test_traffic_is_met_first_and_the_rest_is_shared() -> None:
    # 226 MiB: without traffic (6, 16) is the optimum. tiny_llama must hold 2 sequences of 4,096
    # tokens (4 blocks of 1,024 each): 8 blocks, 94 MiB; 132 MiB are left, so tiny_qwen3 gets 12.
    tenants = [tiny("tiny_llama", ATOM), tiny("tiny_qwen3", ATOM)]
    served = [replace(tenants[0], traffic=Traffic(concurrent_sequences=2)), tenants[1]]
    assert served[0].lower_bound == 8
    assert counts(plan_deployment(ATOM, tenants, [leave(ATOM, 226)]).budget) == {"tiny_llama": 6, "tiny_qwen3": 16}
    plan = plan_deployment(ATOM, served, [leave(ATOM, 226)])
    assert counts(plan.budget) == counts(plan.blocks) == {"tiny_llama": 8, "tiny_qwen3": 12}
    # the brute force, with the traffic as the minimum it is
    assert best(ATOM, [replace(tenants[0], min_blocks=8), tenants[1]], [leave(ATOM, 226)], BUDGET) == counts(
        plan.budget
    )
    text = render_plan(plan, "x")
    assert (
        "traffic: tiny_llama needs 8 blocks (2 concurrent sequence(s) of 4096 tokens, 4 block(s) of 1024 each), "
        "met before the rest is shared" in text
    )
    assert plan_json(plan, "x")["models"][0]["traffic_blocks"] == 8


def test_requests_per_second_and_tokens_give_the_sequences() -> None:
    # 0.75 requests/s x 2 s = 1.5, rounded up: 2 sequences of 1,500 + 600 tokens, 3 blocks each: 6.
    traffic = Traffic(
        requests_per_s=Fraction(3, 4), seconds_per_request=Fraction(2), prompt_tokens=1500, output_tokens=600
    )
    tenant = replace(tiny("tiny_llama", ATOM), traffic=traffic)
    assert traffic.sequences() == 2 and tenant.lower_bound == 6
    assert "(0.75 requests/s x 2 s)" in traffic.describe(tenant.attention)


def test_traffic_that_cannot_be_met_is_an_infeasible_verdict_naming_the_model_and_the_shortfall() -> None:
    # 214 MiB: tiny_llama's 8 blocks (94 MiB) and tiny_qwen3's floor (128 MiB) need 222, 8 MiB more.
    tenants = [replace(tiny("tiny_llama", ATOM), traffic=Traffic(concurrent_sequences=2)), tiny("tiny_qwen3", ATOM)]
    plan = plan_deployment(ATOM, tenants, [leave(ATOM, 214)])
    assert not plan.feasible and plan.chosen.conflict == ("tiny_llama", "tiny_qwen3")
    assert (
        "tiny_llama fits alone but not together with tiny_qwen3: their lower bounds (tiny_llama traffic need "
        "(2 concurrent sequence(s) of 4096 tokens, 4 block(s) of 1024 each) of 8 blocks, tiny_qwen3 floor of 9 "
        "blocks) with the reservations (other) do not fit; on chiplet 0 they need 222 MiB, 8 MiB more than the "
        "214 MiB left by the reservations" in plan.chosen.reason
    )


@pytest.mark.parametrize(
    ("traffic", "message"),
    [
        (Traffic(concurrent_sequences=3), "more sequences than its batch_size of 2 can serve at once"),
        (Traffic(concurrent_sequences=1, prompt_tokens=4000, output_tokens=200), "longer than its max_seq_len of 4096"),
    ],
)
def test_traffic_a_model_cannot_serve_is_a_config_error(traffic: Traffic, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Problem(ATOM, [replace(tiny("tiny_llama", ATOM), traffic=traffic)])


def test_traffic_in_the_deployment_config(tmp_path) -> None:
    d = compose_settings(
        [
            "deployment=tiny_pair",
            "deployment.models.0.traffic={concurrent_sequences:2,prompt_tokens:2000,output_tokens:500}",
            f"build_dir={tmp_path}",
        ]
    ).deployment
    assert d.models[0].traffic == Traffic(concurrent_sequences=2, prompt_tokens=2000, output_tokens=500)
    assert d.models[1].traffic is None


@pytest.mark.parametrize(
    ("traffic", "message"),
    [
        ({}, "deployment.models[0].traffic: give either concurrent_sequences, or requests_per_s with"),
        ({"concurrent_sequences": 2, "requests_per_s": 1.0}, "give either concurrent_sequences"),
        ({"requests_per_s": 1.0}, "give either concurrent_sequences"),
        ({"requests_per_s": -1.0, "seconds_per_request": 2.0}, "traffic.requests_per_s: expected a positive number"),
        ({"concurrent_sequences": 0}, "traffic.concurrent_sequences: expected an integer >= 1"),
        ({"concurrent_sequence": 2}, "deployment.models[0].traffic.concurrent_sequence: not a traffic key"),
        ({"concurrent_sequences": "many"}, "traffic.concurrent_sequences: expected an integer, got 'many'"),
    ],
)
def test_each_bad_traffic_value_is_one_clear_error(traffic: dict, message: str) -> None:
    node = {"device": "atom_max", "models": [{"model": "tiny_llama", "traffic": traffic}, {"model": "tiny_qwen3"}]}
    with pytest.raises(ConfigError) as info:
        deployment_from_config("x", OmegaConf.create(node))
    assert message in str(info.value)


def test_a_printed_change_keeps_the_other_models_traffic(tmp_path) -> None:
    # 214 MiB left: tiny_llama's floor (86) and tiny_qwen3's traffic, 2 sequences of 8 blocks (140),
    # do not fit. Dropping tiny_llama fits; its printed overrides keep tiny_qwen3's traffic.
    from rbln_build.colocation import overrides_for, plan_for

    MiB = 2**20
    base = [
        "deployment=tiny_pair",
        "deployment.models.1.traffic={concurrent_sequences:2}",
        f"deployment.reservations.0.bytes={ATOM.available_per_chiplet // MiB - 214}MB",
        f"build_dir={tmp_path}",
    ]
    settings = compose_settings(base)
    plan = plan_for(settings)
    assert not plan.feasible
    drop = next(s for s in plan.suggestions if s.kind == "drop_model" and s.subject == "tiny_llama")
    printed = overrides_for(settings.deployment)(drop)
    assert printed == ["deployment.models=[{model:tiny_qwen3,port:8101,traffic:{concurrent_sequences:2}}]"]
    applied = compose_settings([*base, *printed])
    assert applied.deployment.models[0].traffic == Traffic(concurrent_sequences=2)
    again = plan_for(applied)
    assert again.feasible and counts(again.chosen) == counts(drop.plan) == {"tiny_qwen3": 16}
