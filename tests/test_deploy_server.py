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

pytestmark = pytest.mark.skipif(not available(), reason="OR-Tools is not installed (the solver extra)")

MiB = 2**20


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
        cap = draw(st.integers(sum(floors) * 9 // 10 // ncards, sum(fulls) * 12 // 10 // ncards + 4 * MiB))
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
        for s in plan.shortfalls:  # each named model is short, at its lower bound, on every card it may use
            t = next(t for t in tenants if t.name == s.name)
            first = choices(target, t, mode)[0] if t.memory_budget is None else None
            charge = need(target, t, s.lower_bound) if first is None else first[1]
            allowed = [pins[t.name]] if t.name in pins else range(len(cards))
            for k in allowed:
                base = [r + m for r, m in zip(reserved(target, cards[k][0]), held(target, cards[k][1]), strict=True)]
                over = max(c + b - target.available_per_chiplet for c, b in zip(charge, base, strict=True))
                assert over >= s.nbytes > 0
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
