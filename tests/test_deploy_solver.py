"""The CP-SAT solver (rbln_build.deploy._cpsat) against the hand-written search (rbln_build.deploy._search),
kept as the oracle, and the brute force (tests/deploy_oracle.py) where enumerating is cheap.

Generated deployments: 2-4 models on every NPU family with 1 or 2 devices, reservations pinned or
spread, weights, minimums, fixed budgets, and margins for the deployment and per device. Both solvers
plan both modes; the plans must be the same, and every plan must fit by what its models really
occupy (the oracle's own pricing) plus the reservations and the margin."""

from __future__ import annotations

import itertools
from dataclasses import replace
from fractions import Fraction

import pytest
from deploy_oracle import best, need, reserved
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_deploy_planner import deployments, leave_bytes

from rbln_build.deploy import CP_SAT, SEARCH, Margin, Margins, Problem, Solver, Target, Tenant, plan_deployment
from rbln_build.deploy._cpsat import available
from rbln_build.estimator import AllocationReport, KVTensor, resolve_attention, resolve_npu

pytestmark = pytest.mark.skipif(not available(), reason="OR-Tools is not installed (the solver extra)")

MiB = 2**20
CR = resolve_npu("RBLN-CR03")


def counts(mode_plan) -> dict[str, int]:
    return {a.name: a.kvcache_num_blocks for a in mode_plan.assignments}


@st.composite
def with_margins(draw):
    target, tenants, reservations = draw(deployments())
    base = tenants[0]
    for k in range(draw(st.integers(max(0, 2 - len(tenants)), 4 - len(tenants)))):  # 2-4 models in all
        tenants.append(replace(base, name=f"copy{k}", memory_budget=None, min_blocks=None))
    # the room, drawn again for all the models: from 9/10 of their floors to past their full pools
    floors = [max(need(target, t, t.attention.num_min_blocks)) for t in tenants]
    fulls = [max(need(target, t, t.attention.num_full_blocks)) for t in tenants]
    cap = draw(st.integers(sum(floors) * 9 // 10, sum(fulls) + 4 * MiB))
    reservations = [leave_bytes(target, cap + 8 * MiB, reservations[0].chiplet)]  # room for most margins

    def margin():
        if draw(st.booleans()):
            return Margin(nbytes=draw(st.integers(0, 8)) * MiB)
        return Margin(fraction=Fraction(draw(st.integers(0, 5)), 10_000))

    devices = tuple((n, margin()) for n in range(target.num_devices) if draw(st.booleans()))
    return target, tenants, reservations, Margins(margin(), devices)


def held(target: Target, margins: Margins) -> list[int]:
    """The margin per (node, chiplet), computed here from its definition (bytes, or a fraction rounded up)."""
    out = []
    for node, _ in target.buckets():
        m = dict(margins.devices).get(node, margins.default)
        out.append(m.nbytes + -(-m.fraction.numerator * target.available_per_chiplet // m.fraction.denominator))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(with_margins())
def test_the_solver_plans_what_the_search_plans_and_every_plan_fits(case) -> None:
    target, tenants, reservations, margins = case
    search = plan_deployment(target, tenants, reservations, margins=margins, solver=Solver(SEARCH))
    solver = plan_deployment(target, tenants, reservations, margins=margins, solver=Solver(CP_SAT))
    margin = held(target, margins)
    for a, b in ((search.budget, solver.budget), (search.blocks, solver.blocks)):
        assert a.feasible == b.feasible
        if not a.feasible:
            assert a.conflict == b.conflict
            continue
        assert counts(a) == counts(b) and a.objective == b.objective
        assert b.proof.solver in (CP_SAT, SEARCH) and b.proof.optimal  # SEARCH: nothing left to solve
        size = 1
        for t in tenants:
            size *= t.attention.num_full_blocks - t.attention.num_min_blocks + 1
        if size <= 4_000:  # the brute force, where enumerating is cheap
            assert counts(b) == best(target, tenants, reservations, b.mode, margin=margin)
        occupied = [need(target, solver.tenant(x.name), x.kvcache_num_blocks) for x in b.assignments]
        totals = [sum(col) for col in zip(reserved(target, reservations), margin, *occupied, strict=True)]
        assert max(totals) <= target.available_per_chiplet


def similar(count: int, seed: int) -> list[Tenant]:
    """``count`` made-up models on one RBLN-CR03 (batch 4, 8 blocks a sequence: floor 9, full 32),
    each with its own weights and KV bytes per chiplet."""
    attention = resolve_attention(
        CR, batch_size=4, max_seq_len=8192, attn_impl="flash_attn", kvcache_partition_len=1024
    )
    out = []
    for i in range(count):
        k = (seed * 7 + i * 13) % 11
        rep = AllocationReport(
            alloc={"prefill": {"weights": ((200 * MiB + k * 16 * MiB, 180 * MiB, 190 * MiB, 50 * MiB),)}},
            kv_tensors={
                f"kv{j}": KVTensor(True, ((3 * MiB + (k + j) % 3 * MiB, 2 * MiB + k % 2 * MiB, 2 * MiB, MiB),))
                for j in range(2)
            },
        )
        out.append(Tenant(f"m{i}", rep, attention))
    return out


def tight_room(target: Target, tenants: list[Tenant], slack: Fraction) -> list:
    """A reservation that leaves the floors plus ``slack`` of the way to the full pools, per chiplet."""
    from rbln_build.deploy import Reservation

    floors = [sum(c) for c in zip(*(need(target, t, t.attention.num_min_blocks) for t in tenants), strict=True)]
    fulls = [sum(c) for c in zip(*(need(target, t, t.attention.num_full_blocks) for t in tenants), strict=True)]
    cap = [f + int((u - f) * slack) for f, u in zip(floors, fulls, strict=True)]
    return [Reservation(f"r{c}", target.available_per_chiplet - x, c) for c, x in enumerate(cap)]


def test_a_time_limit_keeps_a_plan_that_fits_and_a_gap_that_bounds_the_optimum() -> None:
    target = Target("rebel100", CR, 1)
    tenants = similar(16, 1)
    reservations = tight_room(target, tenants, Fraction(1, 2))
    exact = Problem(target, tenants, reservations, solver=Solver(CP_SAT, time_limit=120)).solve("blocks")
    assert exact.proof.optimal
    rushed = Problem(target, tenants, reservations, solver=Solver(CP_SAT, time_limit=0.001)).solve("blocks")
    assert rushed.feasible and min(rushed.headroom()) >= 0
    assert rushed.objective.min_share == exact.objective.min_share  # step 1 is exact whatever the clock
    assert exact.objective.weighted_share - rushed.objective.weighted_share <= rushed.proof.gap
    if not rushed.proof.optimal:
        assert "not proven optimal in 0.001 s" in rushed.proof.note or "not proven in 0.001 s" in rushed.proof.note


@pytest.mark.parametrize("count", [6, 9])
def test_similar_models_equal_the_search_where_it_finishes(count: int) -> None:
    target = Target("rebel100", CR, 1)
    for seed, slack in itertools.product(range(2), (Fraction(1, 20), Fraction(1, 2))):
        tenants = similar(count, seed)
        reservations = tight_room(target, tenants, slack)
        for mode in ("budget", "blocks"):
            a = Problem(target, tenants, reservations, solver=Solver(SEARCH)).solve(mode)
            b = Problem(target, tenants, reservations, solver=Solver(CP_SAT)).solve(mode)
            assert counts(a) == counts(b) and b.proof.optimal, (count, seed, slack, mode)


def test_the_solver_is_chosen_in_the_deployment_and_says_what_it_proved(tmp_path) -> None:
    from rbln_build.colocation import plan_for
    from rbln_build.config._config import compose_settings
    from rbln_build.deploy import render_plan

    where = f"build_dir={tmp_path}"  # the reports' inventories are cached there
    settings = compose_settings(
        ["deployment=tiny_pair", "deployment.solver.method=cp-sat", "deployment.solver.time_limit=30", where]
    )
    assert settings.deployment.solver == Solver(CP_SAT, 30.0)
    plan = plan_for(settings)
    default = plan_for(compose_settings(["deployment=tiny_pair", where]))
    assert counts(plan.budget) == counts(default.budget) and counts(plan.blocks) == counts(default.blocks)
    assert plan.budget.proof.solver == CP_SAT and plan.budget.proof.optimal
    assert default.budget.proof.solver == SEARCH  # auto: the search finishes, OR-Tools is not needed
    assert "; solved by CP-SAT (OR-Tools): proven optimal" in render_plan(plan, "tiny_pair")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "deployment.solver.method=gurobi",
            "deployment.solver.method: expected one of auto, search, cp-sat, got 'gurobi'",
        ),
        ("deployment.solver.time_limit=0", "deployment.solver.time_limit: expected seconds above 0"),
    ],
)
def test_a_bad_solver_setting_is_one_clear_error(override: str, message: str) -> None:
    from rbln_build.config._config import compose_settings
    from rbln_build.errors import ConfigError

    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        compose_settings(["deployment=tiny_pair", override])


def test_a_stage_stopped_before_any_solution_does_not_trust_the_solvers_bound(monkeypatch) -> None:
    """CP-SAT stopped by the clock before its first solution may report a bound that nothing founded
    (below the plan kept: the server's packer met it). The gap printed must still bound the optimum:
    here the first stage is stopped with such a bound (1, in the solver's integer units), as CP-SAT
    reports it, and the plan's gap is checked against the proven optimum."""
    from ortools.sat.python import cp_model

    target = Target("rebel100", CR, 1)
    tenants = similar(16, 1)
    reservations = tight_room(target, tenants, Fraction(1, 2))
    exact = Problem(target, tenants, reservations, solver=Solver(CP_SAT, time_limit=120)).solve("blocks")
    assert exact.proof.optimal

    class Stopped(cp_model.CpSolver):  # the real solver, stopped before it finds anything
        def solve(self, model, *args, **kwargs):  # type: ignore[no-untyped-def]
            return cp_model.UNKNOWN

        @property
        def best_objective_bound(self) -> float:
            return 1.0

    monkeypatch.setattr(cp_model, "CpSolver", Stopped)
    rushed = Problem(target, tenants, reservations, solver=Solver(CP_SAT, time_limit=30)).solve("blocks")
    assert rushed.feasible and min(rushed.headroom()) >= 0 and not rushed.proof.optimal
    assert rushed.objective.min_share == exact.objective.min_share
    gap = exact.objective.weighted_share - rushed.objective.weighted_share
    assert gap > 0  # the kept plan (the admissible minimum) is below the optimum
    assert rushed.proof.gap >= gap  # and the printed gap says so: at most every model at its full pool
    full = sum(t.weight for t in tenants)  # every share 1
    assert rushed.proof.gap == full - rushed.objective.weighted_share
