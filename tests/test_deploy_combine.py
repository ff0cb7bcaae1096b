"""Pairs of changes (rbln_build.deploy.suggest, ``combinations``): searched only when no single change
fits, each applied here from what it says and planned again (it fits, with the counts it printed, which
are the brute force's optimum for the changed deployment), every pair of dropped models that the brute
force says fits is among them, and the search is bounded by a number of plans whatever the size.

The room is cut by a margin of the device's own (``device_margins``), which no single change lowers,
so that the singles can all fail while pairs fit.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest
from deploy_oracle import best, held
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from test_deploy_suggest import ATOM, BLOCKS, BUDGET, REBEL, applied, counts, reshape, retarget, tenant

from rbln_build.deploy import DeploymentPlan, Margin, Margins, Target, plan_deployment, render_plan

MiB = 2**20


def own_margin(target: Target, cap_mib: int) -> Margins:
    """Device 0's own margin, leaving ``cap_mib`` MiB of every chiplet; the deployment's margin none."""
    return Margins(Margin(0), ((0, Margin(target.available_per_chiplet - cap_mib * MiB)),))


def check(plan: DeploymentPlan) -> None:
    """Every combination applied and planned again fits, with its counts, which are the brute force's."""
    for s in plan.suggestions:
        assert s.kind == "combination" and len(s.parts) == 2, s.describe()
        target, mode, tenants, reservations = applied(plan, s)
        again = plan_deployment(target, tenants, reservations, mode, margins=plan.margins).chosen
        assert again.feasible and counts(again) == counts(s.plan), s.describe()
        assert best(target, tenants, reservations, mode, held(target, plan.margins)) == counts(s.plan), s.describe()


@st.composite
def cases(draw: Any) -> tuple[Target, list[dict[str, Any]], int, str]:
    target = draw(st.sampled_from([ATOM, REBEL]))
    models = [
        {
            "recipe": draw(st.sampled_from(["tiny_llama", "tiny_qwen3"])),
            "batch_size": draw(st.integers(1, 3)),
            "min_share": draw(st.sampled_from([None, None, Fraction(1, 2), Fraction(1)])),
        }
        for _ in range(draw(st.integers(3, 4)))
    ]
    low = {ATOM: 60, REBEL: 15}[target]
    return target, models, draw(st.integers(low, 4 * low)), draw(st.sampled_from([BUDGET, BLOCKS]))


def build(target: Target, models: list[dict[str, Any]]) -> list:
    out = []
    for i, m in enumerate(models):
        t = tenant(f"m{i}", m["recipe"], target, batch_size=m["batch_size"])
        if m["min_share"] is not None:
            share = m["min_share"]
            t = replace(t, min_blocks=max(t.floor, -(-t.full * share.numerator // share.denominator)))
        out.append(t)
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases())
def test_pairs_fit_when_no_single_change_does(case) -> None:
    target, models, cap, mode = case
    tenants = build(target, models)
    margins = own_margin(target, cap)
    plan = plan_deployment(target, tenants, [], mode, reshape=reshape, retarget=retarget, margins=margins)
    assume(not plan.feasible)
    assume(plan.combined is not None)  # no single change fits
    event(f"{len(plan.suggestions)} pair(s)")
    n = len(tenants)
    for i in range(n):  # the singles' verdict, by brute force: dropping one model does not fit
        assert best(target, tenants[:i] + tenants[i + 1 :], [], mode, held(target, margins)) is None
    check(plan)
    plans, limit = plan.combined
    assert plans <= limit
    if plans < limit:  # the search was complete: every pair of drops that fits is listed
        listed = {
            frozenset(p.subject for p in s.parts)
            for s in plan.suggestions
            if {p.kind for p in s.parts} == {"drop_model"}
        }
        for i, j in itertools.combinations(range(n), 2):
            rest = [t for k, t in enumerate(tenants) if k not in (i, j)]
            if best(target, rest, [], mode, held(target, margins)) is not None:
                assert frozenset((tenants[i].name, tenants[j].name)) in listed


def test_a_smaller_batch_and_a_shorter_length_together() -> None:
    # three tiny models on one ATOM-Max with 200 MiB: no single change fits; dropping a tiny_qwen3 and
    # shortening the other fits, the length made as long as it can be with the drop applied
    tenants = [tenant("q1", "tiny_qwen3", ATOM), tenant("q2", "tiny_qwen3", ATOM), tenant("l1", "tiny_llama", ATOM)]
    plan = plan_deployment(ATOM, tenants, [], BUDGET, reshape=reshape, margins=own_margin(ATOM, 200))
    assert not plan.feasible and plan.combined is not None
    found = {s.describe(): counts(s.plan) for s in plan.suggestions}
    assert found["q2: max_seq_len 8192 -> 3072 AND drop model q1"] == {"q2": 4, "l1": 8}
    assert found["drop model q2 AND drop model q1"] == {"l1": 8}
    check(plan)
    text = render_plan(plan, "x")
    assert "no single change fits; pairs of changes searched with" in text
    assert "  q2: max_seq_len 8192 -> 3072 AND drop model q1: gives up 1.6250; plan: q2 4, l1 8" in text


def test_the_search_is_bounded_by_the_plans_it_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Twelve models, and room for none of them: every pair fails, and the search stops at its bound.
    The plans are counted by the planner itself (``Problem.solve`` calls while the search runs)."""
    from rbln_build.deploy import _plan, _planner

    made = {"inside": False, "solves": 0}
    solve = _planner.Problem.solve

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        made["solves"] += made["inside"]
        return solve(self, *args, **kwargs)

    def combinations(*args, **kwargs):  # type: ignore[no-untyped-def]
        made["inside"] = True
        try:
            return search(*args, **kwargs)
        finally:
            made["inside"] = False

    search = _plan.combinations
    monkeypatch.setattr(_planner.Problem, "solve", counting)
    monkeypatch.setattr(_plan, "combinations", combinations)
    tenants = [tenant(f"m{i}", ["tiny_llama", "tiny_qwen3"][i % 2], ATOM, min_blocks=None) for i in range(12)]
    for limit in (40, 120):
        made["solves"] = 0
        plan = plan_deployment(
            ATOM, tenants, [], BUDGET, reshape=reshape, margins=own_margin(ATOM, 40), combination_limit=limit
        )
        assert not plan.feasible and plan.suggestions == ()
        assert plan.combined == (limit, limit)  # it reached the bound, and says so
        assert 0 < made["solves"] <= limit
        assert "(the bound: more pairs may fit): none fits." in render_plan(plan, "x")
