"""A server: each model placed on one of 2-4 cards (rbln_build.deploy.server), against the brute force.

Generated servers: 2-4 cards of one target (one NPU, or a tensor-parallel pair), 2-12 models
(made-up reports, weights, minimums, fixed budgets, traffic), each card with its own reservation
and margin, and some models pinned to a card. The plan must equal the exhaustive check
(``deploy_oracle.best_server``: every (card, count) combination) wherever enumerating is cheap, and
every plan must fit, card by card, by what its models really occupy plus the card's reservation and
margin (the oracle's own pricing)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest
from deploy_oracle import best_server, choices, held, need, reserved
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_deploy_planner import deployments, leave_bytes

from rbln_build.deploy import Margin, Margins, Target, Traffic
from rbln_build.deploy._cpsat import available
from rbln_build.deploy.server import Card, Server, plan_server
from rbln_build.estimator import resolve_npu

pytestmark = pytest.mark.skipif(not available(), reason="OR-Tools is not installed (the solver extra)")

MiB = 2**20
CR = resolve_npu("RBLN-CR03")


@st.composite
def servers(draw):
    target, tenants, _ = draw(deployments())
    base = list(tenants)
    for k in range(draw(st.integers(max(0, 2 - len(tenants)), 12 - len(tenants)))):  # 2-12 models in all
        t = replace(draw(st.sampled_from(base)), name=f"c{k}", memory_budget=None, min_blocks=None)
        a = t.attention
        if draw(st.booleans()):
            t = replace(t, min_blocks=draw(st.integers(a.num_min_blocks, a.num_full_blocks)))
        if draw(st.booleans()):
            tokens = draw(st.integers(1, a.max_seq_len))
            prompt = draw(st.integers(0, tokens))
            traffic = Traffic(
                concurrent_sequences=draw(st.integers(1, a.batch_size)),
                prompt_tokens=prompt,
                output_tokens=tokens - prompt,
            )
            t = replace(t, traffic=traffic)
        tenants.append(t)
    ncards = draw(st.integers(2, 4))
    floors = [max(need(target, t, t.attention.num_min_blocks)) for t in tenants]
    fulls = [max(need(target, t, t.attention.num_full_blocks)) for t in tenants]
    cards = []
    for _ in range(ncards):
        low = min(floors) // 2 if draw(st.integers(0, 7)) == 0 else sum(floors) * 9 // 10 // ncards  # some too small
        cap = draw(st.integers(low, sum(fulls) * 12 // 10 // ncards + 4 * MiB))
        chiplet = draw(st.sampled_from([None, *range(target.num_chiplets)]))
        margin = Margin(nbytes=draw(st.integers(0, 4)) * MiB)
        devices = tuple(
            (n, Margin(fraction=Fraction(draw(st.integers(0, 3)), 10_000))) for n in range(1) if draw(st.booleans())
        )
        cards.append(([leave_bytes(target, cap + 8 * MiB, chiplet)], Margins(margin, devices)))
    pins = {t.name: draw(st.integers(0, ncards - 1)) for t in tenants if draw(st.integers(0, 5)) == 0}
    return target, cards, tenants, pins


def _size(target: Target, cards, tenants, pins, mode: str) -> int:
    size = 1
    for t in tenants:
        size *= (1 if t.name in pins else len(cards)) * max(len(choices(target, t, mode)), 1)
    return size


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(servers(), st.sampled_from(["budget", "blocks"]))
def test_server_plans_equal_the_exhaustive_check_and_fit_every_card(case, mode) -> None:
    target, cards, tenants, pins = case
    server = Server(target, tuple(Card(tuple(r), m) for r, m in cards))
    plan = plan_server(server, tenants, mode, pins)
    if _size(target, cards, tenants, pins, mode) <= 20_000:
        expected = best_server(target, cards, tenants, mode, pins)
        if expected is None:
            assert not plan.feasible and plan.reason
        else:
            assert plan.feasible and (plan.counts(), dict(plan.placement)) == expected
            assert plan.proof.optimal
    if not plan.feasible:
        for s in plan.shortfalls:  # each named model is short at its lower bound on every card it may use
            t = next(t for t in tenants if t.name == s.name)
            charge = need(target, t, s.lower_bound)
            allowed = [pins[t.name]] if t.name in pins else range(len(cards))
            overs = []
            for k in allowed:
                base = [r + m for r, m in zip(reserved(target, cards[k][0]), held(target, cards[k][1]), strict=True)]
                overs.append(max(c + b - target.available_per_chiplet for c, b in zip(charge, base, strict=True)))
            assert min(overs) == s.nbytes > 0
        if not plan.shortfalls and plan.fits_on is not None:  # the fewest cards like the last one that fit
            assert len(cards) < plan.fits_on <= len(tenants)
            for n, fit in ((plan.fits_on, True), (plan.fits_on - 1, False)):
                more = cards + [cards[-1]] * (n - len(cards))
                if n > len(cards) and _size(target, more, tenants, pins, mode) <= 20_000:
                    assert (best_server(target, more, tenants, mode, pins) is not None) == fit
        return
    for k, (res, margins) in enumerate(cards):
        on = [t for t in tenants if plan.card_of(t.name) == k]
        totals = [r + m for r, m in zip(reserved(target, res), held(target, margins), strict=True)]
        for t in on:
            totals = [a + b for a, b in zip(totals, need(target, t, plan.counts()[t.name]), strict=True)]
        assert max(totals) <= target.available_per_chiplet
        assert [a.name for a in plan.cards[k].assignments] == [t.name for t in on]
        assert min(plan.cards[k].headroom()) >= 0
    for t in tenants:
        if t.name in pins:
            assert plan.card_of(t.name) == pins[t.name]


def test_traffic_on_a_server_is_met_or_its_shortfall_named() -> None:
    # Two ATOM-Max cards of 226 and 140 MiB. tiny_llama must hold 2 sequences of 4,096 tokens: 8 blocks
    # (94 MiB); tiny_qwen3 takes 128 MiB at 9-12 blocks, 140 at 13-16, and a replica of it the same.
    from test_deploy_planner import ATOM, leave, tiny

    llama = replace(tiny("tiny_llama", ATOM), traffic=Traffic(concurrent_sequences=2))
    qwen = tiny("tiny_qwen3", ATOM)
    tenants = [llama, qwen, replace(qwen, name="tiny_qwen3_b")]
    cards = [([leave(ATOM, 226)], Margins()), ([leave(ATOM, 140)], Margins())]
    server = Server(ATOM, tuple(Card(tuple(r), m) for r, m in cards))
    for mode in ("budget", "blocks"):
        plan = plan_server(server, tenants, mode)
        assert plan.feasible and plan.counts()["tiny_llama"] >= 8
        assert (plan.counts(), dict(plan.placement)) == best_server(ATOM, cards, tenants, mode)
    # 90 MiB on each card: tiny_llama's 8 blocks fit neither, 4 MiB short
    small = Server(ATOM, (Card((leave(ATOM, 90),)),) * 2)
    plan = plan_server(small, [llama, qwen], "budget")
    assert not plan.feasible and [s.name for s in plan.shortfalls] == ["tiny_llama", "tiny_qwen3"]
    assert plan.shortfalls[0].nbytes == 4 * MiB and plan.shortfalls[0].lower_bound == 8
    assert plan.reason.startswith(
        "tiny_llama at 8 blocks (its traffic: 2 concurrent sequence(s) of 4096 tokens, 4 block(s) of 1024 each) "
        "fits no card it may use even alone: 4,194,304 B short on card 0, device 0, chiplet 0, the least short"
    )


def test_pins_and_a_bad_card_are_checked() -> None:
    from test_deploy_planner import ATOM, leave, tiny

    from rbln_build.errors import ConfigError

    tenants = [tiny("tiny_llama", ATOM), tiny("tiny_qwen3", ATOM)]
    server = Server(ATOM, (Card((leave(ATOM, 400),)), Card((leave(ATOM, 400),))))
    plan = plan_server(server, tenants, "blocks")
    assert dict(plan.placement) == {"tiny_llama": 0, "tiny_qwen3": 0}  # both fit card 0: the lowest card
    assert dict(plan_server(server, tenants, "blocks", {"tiny_qwen3": 1}).placement) == {
        "tiny_llama": 0,
        "tiny_qwen3": 1,
    }
    assert server.device_ids(1) == (1,)
    with pytest.raises(
        ConfigError, match=r"deployment model tiny_qwen3: card 2 does not exist \(the server has 2 card"
    ):
        plan_server(server, tenants, "blocks", {"tiny_qwen3": 2})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deployments(), st.sampled_from(["budget", "blocks"]))
def test_a_server_of_one_card_plans_what_the_one_card_planner_plans(case, mode) -> None:
    from rbln_build.deploy import plan_deployment

    target, tenants, reservations = case
    one = plan_deployment(target, tenants, reservations, mode)
    plan = plan_server(Server(target, (Card(tuple(reservations)),)), tenants, mode)
    assert plan.feasible == one.chosen.feasible
    if plan.feasible:
        assert plan.counts() == {a.name: a.kvcache_num_blocks for a in one.chosen.assignments}
        assert plan.objective == one.chosen.objective
        assert plan.cards[0].assignments == one.chosen.assignments  # budgets, bytes and usage too


def test_a_time_limit_keeps_a_placement_that_fits_and_says_what_it_did_not_prove() -> None:
    from test_deploy_solver import similar, tight_room

    from rbln_build.deploy import CP_SAT, Solver
    from rbln_build.errors import ConfigError

    target = Target("rebel100", CR, 1)
    tenants = similar(16, 1)
    card = Card(tuple(tight_room(target, tenants[::4], Fraction(1, 2))))
    server = Server(target, (card,) * 4)
    exact = plan_server(server, tenants, "blocks", solver=Solver(CP_SAT, time_limit=120))
    try:
        rushed = plan_server(server, tenants, "blocks", solver=Solver(CP_SAT, time_limit=0.5))
    except ConfigError as exc:  # the clock stopped it before any placement was found: it says so
        assert "found no placement within its time limit of 0.5 s" in str(exc)
        return
    assert rushed.feasible and all(min(mp.headroom()) >= 0 for mp in rushed.cards)
    if rushed.proof.optimal:
        assert rushed.counts() == exact.counts() and rushed.placement == exact.placement
    else:
        assert "not proven" in rushed.proof.note and "0.5 s" in rushed.proof.note
        assert rushed.objective.min_share <= exact.objective.min_share
        assert exact.proof.optimal
        if (
            rushed.objective.min_share == exact.objective.min_share
            and "weighted share is optimal" not in rushed.proof.note
        ):
            assert exact.objective.weighted_share - rushed.objective.weighted_share <= rushed.proof.gap
