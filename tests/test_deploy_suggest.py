"""An infeasible deployment's answers (rbln_build.deploy._conflict, suggest): every model that cannot
fit with its reason, where a model that cannot fit even alone would fit, and changes that keep every
constraint they do not mention; each suggestion applied by this test, independently, plans as feasible.

Sizes of the tiny recipes per chiplet: see tests/test_deploy_planner.py (tiny_llama's floor 86 MiB
and tiny_qwen3's 128 MiB on one RBLN-CA25).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from memory_helpers import report, spec

from rbln_build.deploy import BLOCKS, BUDGET, DeploymentPlan, Reservation, Suggestion, Target, Tenant, plan_deployment
from rbln_build.estimator import resolve_npu

MiB = 2**20
CA, CR = resolve_npu("RBLN-CA25"), resolve_npu("RBLN-CR03")
ATOM, ATOM4, REBEL = Target("atom_max", CA, 1), Target("atom_max_x4", CA, 4), Target("rebel100", CR, 1)
TARGETS = (ATOM, ATOM4, REBEL)


def tenant(name: str, recipe: str, target: Target, **kw: Any) -> Tenant:
    build = {k: kw.pop(k) for k in ("batch_size", "max_seq_len") if k in kw}
    s = spec(recipe, target.npu.name, target.num_devices, **build)
    rep = report(recipe, target.npu.name, target.num_devices, **build)
    options = (("recipe", recipe), ("target", target.name), *sorted(build.items()))
    return Tenant(name, rep, s.attention, options=options, **kw)


def _rebuild(t: Tenant, target: Target | None = None, **change: Any) -> Tenant:
    """The model again, from its recipe, at another geometry or on another target; every constraint kept."""
    options = {**dict(t.options), **change}
    recipe, here = options.pop("recipe"), options.pop("target")
    target = target or next(x for x in TARGETS if x.name == here)
    return replace(
        tenant(t.name, recipe, target, **options),  # type: ignore[arg-type]
        weight=t.weight,
        min_blocks=t.min_blocks,
        memory_budget=t.memory_budget,
    )


def reshape(t: Tenant, change: dict[str, int]) -> Tenant:
    return _rebuild(t, **change)


def retarget(t: Tenant, target: Target) -> Tenant:
    return _rebuild(t, target)


def leave(target: Target, cap_mib: int) -> Reservation:
    return Reservation("other", (target.available_per_chiplet - cap_mib * MiB) * target.num_chiplets, None)


def counts(mode_plan) -> dict[str, int]:
    return {a.name: a.kvcache_num_blocks for a in mode_plan.assignments}


def test_every_model_that_cannot_fit_is_named_with_its_reason() -> None:
    # 120 MiB: tiny_qwen3's floor (128) cannot fit even alone; the two tiny_llama copies (86 each) fit
    # alone but not together; a third model that fits with anyone is not named.
    tenants = [
        tenant("qwen", "tiny_qwen3", ATOM),
        tenant("llama_a", "tiny_llama", ATOM),
        tenant("llama_b", "tiny_llama", ATOM),
    ]
    plan = plan_deployment(ATOM, tenants, [leave(ATOM, 120)], retarget=retarget, targets=TARGETS)
    assert [(c.name, c.alone, c.partners) for c in plan.chosen.conflicts] == [
        ("qwen", True, ()),
        ("llama_a", False, (("llama_b",),)),
        ("llama_b", False, (("llama_a",),)),
    ]
    assert plan.chosen.conflict == ("qwen", "llama_a", "llama_b")
    reasons = [c.reason for c in plan.chosen.conflicts]
    assert reasons[0] == (
        "qwen cannot reach its floor of 9 blocks on atom_max even alone with the reservations (other): on "
        "chiplet 0 it needs 128 MiB, 8 MiB more than the 120 MiB left by the reservations"
    )
    assert reasons[1].startswith("llama_a fits alone but not together with llama_b: ")
    assert "on chiplet 0 they need 172 MiB, 52 MiB more than the 120 MiB" in reasons[1]
    # where qwen alone would fit: the same reservation (spread over the chiplets) on the other targets
    assert plan.elsewhere == (("qwen", ("atom_max_x4", "rebel100")),)


def test_several_minimal_conflicts_are_all_named() -> None:
    # 215 MiB: llama (86) fits with either qwen (128) but the two qwens (256) conflict, and llama with
    # both of them. Minimal conflicts: {qwen_a, qwen_b}; llama is in none of them, so it is not named.
    tenants = [
        tenant("llama", "tiny_llama", ATOM),
        tenant("qwen_a", "tiny_qwen3", ATOM),
        tenant("qwen_b", "tiny_qwen3", ATOM),
    ]
    plan = plan_deployment(ATOM, tenants, [leave(ATOM, 215)])
    assert [(c.name, c.partners) for c in plan.chosen.conflicts] == [
        ("qwen_a", (("qwen_b",),)),
        ("qwen_b", (("qwen_a",),)),
    ]


def test_a_batch_change_keeps_min_blocks_or_says_what_it_becomes() -> None:
    # tiny_qwen3 (batch 2, 8192 tokens) with min_blocks 12 of 16, and 202 MiB: 12 blocks cost 128, with
    # tiny_llama's floor (86) 214. At batch 1 the full pool is 8 blocks (116 MiB): min_blocks 12 cannot
    # stay, and the suggestion says it becomes 8. Shorter lengths keep min_blocks 12 while the pool
    # holds 12 blocks (7168, 6144 tokens: still 128 MiB), and lower it only below that: at 4096 tokens
    # (8 blocks, 116 MiB) it fits, saying min_blocks 12 -> 8.
    tenants = [tenant("tiny_llama", "tiny_llama", ATOM), tenant("tiny_qwen3", "tiny_qwen3", ATOM, min_blocks=12)]
    plan = plan_deployment(ATOM, tenants, [leave(ATOM, 202)], reshape=reshape)
    changes = {(s.kind, s.subject): s for s in plan.suggestions}
    batch = changes[("batch_size", "tiny_qwen3")]
    assert (batch.old, batch.new, batch.also) == (2, 1, (("min_blocks", 12, 8),))
    assert batch.describe() == "tiny_qwen3: batch_size 2 -> 1, min_blocks 12 -> 8"
    assert counts(batch.plan)["tiny_qwen3"] == 8
    length = changes[("max_seq_len", "tiny_qwen3")]
    assert (length.new, length.also) == (4096, (("min_blocks", 12, 8),))
    for s in plan.suggestions:
        assert apply_and_plan(plan, s).feasible


def test_the_largest_reservation_that_fits_and_other_devices() -> None:
    # 16,096 MiB on one RBLN-CA25; a reservation of all but 100 MiB leaves room for tiny_llama's floor
    # (86) but not tiny_qwen3's (128): the largest reservation that fits leaves exactly 214 MiB.
    tenants = [tenant("tiny_llama", "tiny_llama", ATOM), tenant("tiny_qwen3", "tiny_qwen3", ATOM)]
    reservations = [leave(ATOM, 100)]
    plan = plan_deployment(ATOM, tenants, reservations, retarget=retarget, targets=TARGETS)
    by_kind = {s.kind: s for s in plan.suggestions}
    assert by_kind["reservation"].new == ATOM.available_per_chiplet - 214 * MiB
    assert by_kind["reservation"].plan.headroom() == (0,)
    # a reservation is bytes per device: on four ATOM-Max cards each still keeps 100 MiB, too little
    # for the pair's tensor-parallel shares; a Rebel100 spreads it over 4 chiplets of 35,840 MiB
    devices = [s.new for s in plan.suggestions if s.kind == "device"]
    assert devices == ["rebel100"]
    for s in plan.suggestions:
        assert apply_and_plan(plan, s).feasible


def test_a_fixed_budget_below_the_floor_is_named_with_the_estimators_reason_and_a_budget_that_fits() -> None:
    # 60 MB gives tiny_qwen3 none of its 9 floor blocks: its own conflict, with optimum-rbln's message
    # as one sentence of the reason (rendered with a single period), and the largest budget that fits
    tenants = [tenant("tiny_llama", "tiny_llama", ATOM), tenant("tiny_qwen3", "tiny_qwen3", ATOM, memory_budget="60MB")]
    plan = plan_deployment(ATOM, tenants)
    (conflict,) = plan.chosen.conflicts
    assert conflict.name == "tiny_qwen3" and conflict.alone
    assert conflict.reason.startswith(
        "tiny_qwen3 cannot reach its floor on atom_max with its fixed memory_budget '60MB': Insufficient memory "
        "for the required KV cache: only 0 blocks can be allocated, but at least 9 blocks are required."
    )
    assert not conflict.reason.endswith(".")  # the plan's text adds the sentence's period
    raised = next(s for s in plan.suggestions if s.kind == "memory_budget")
    assert (raised.old, raised.new) == ("60MB", "140MB") and counts(raised.plan) == {"tiny_llama": 8, "tiny_qwen3": 16}
    assert apply_and_plan(plan, raised).feasible


# -- every suggestion, applied independently, plans as feasible ------------------------------------


def apply_and_plan(plan: DeploymentPlan, s: Suggestion) -> Any:
    """Apply a suggestion from what it says (kind, subject, new value, further changes; a combination's
    changes one after the other), rebuilding each changed model's report here, and plan again in the
    configured mode (or the one it sets)."""
    target, mode, tenants, reservations = applied(plan, s)
    return plan_deployment(target, tenants, reservations, mode, margins=plan.margins).chosen


def applied(plan: DeploymentPlan, s: Suggestion) -> tuple[Target, str, list[Tenant], list[Reservation]]:
    """The deployment with the suggestion applied: its target, mode, models and reservations."""
    target, mode = plan.target, plan.mode
    tenants, reservations = list(plan.tenants), list(plan.reservations)
    for p in s.parts or (s,):
        also = {k: new for k, _, new in p.also}
        if p.kind == "mode":
            mode = BLOCKS
        elif p.kind == "device":
            target = next(t for t in TARGETS if t.name == p.new)
            tenants = [retarget(t, target) for t in tenants]
        elif p.kind == "drop_model":
            tenants = [t for t in tenants if t.name != p.subject]
        elif p.kind in ("reservation", "drop_reservation"):
            r = next(r for r in reservations if r.name == p.subject)
            reservations = [x for x in reservations if x is not r]
            if p.kind == "reservation":
                reservations.append(replace(r, nbytes=p.new))  # type: ignore[arg-type]
        else:
            i = next(i for i, t in enumerate(tenants) if t.name == p.subject)
            t = tenants[i]
            if p.kind in ("batch_size", "max_seq_len"):
                t = _rebuild(t, **{p.kind: p.new})
            else:
                t = replace(t, **{p.kind: p.new})
            tenants[i] = replace(t, **also)
    return target, mode, tenants, reservations


@st.composite
def infeasible(draw):
    """Plain parameters only (reports are built in the test: building one seeds a random generator)."""
    target = draw(st.sampled_from([ATOM, REBEL]))
    models = []
    for i in range(draw(st.integers(2, 3))):
        recipe = draw(st.sampled_from(["tiny_llama", "tiny_qwen3"]))
        models.append(
            {
                "name": f"m{i}",
                "recipe": recipe,
                "batch_size": draw(st.integers(1, 3)),
                "weight": Fraction(draw(st.sampled_from([1, 2]))),
                "min_share": draw(st.sampled_from([None, None, Fraction(1, 2), Fraction(3, 4), Fraction(1)])),
            }
        )
    if draw(st.integers(0, 3)) == 0:
        models[-1]["memory_budget"] = f"{draw(st.integers(80, 600))}MB"
    cap = draw(st.integers(60, 420))  # MiB per chiplet left to the models
    chiplet = draw(st.sampled_from([None, *range(target.num_chiplets)]))
    return target, models, cap, chiplet, draw(st.sampled_from([BUDGET, BLOCKS]))


def build_case(target: Target, models: list[dict[str, Any]], cap: int, chiplet: int | None) -> tuple[list, list]:
    tenants = []
    for m in models:
        t = tenant(m["name"], m["recipe"], target, batch_size=m["batch_size"], weight=m["weight"])
        if "memory_budget" in m:
            t = replace(t, memory_budget=m["memory_budget"])
        elif m["min_share"] is not None:
            t = replace(t, min_blocks=max(t.floor, -(-t.full * m["min_share"].numerator // m["min_share"].denominator)))
        tenants.append(t)
    per = target.available_per_chiplet - cap * MiB
    return tenants, [Reservation("other", per if chiplet is not None else per * target.num_chiplets, chiplet)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(infeasible())
def test_every_suggestion_applied_plans_feasible(case) -> None:
    target, models, cap, chiplet, mode = case
    tenants, reservations = build_case(target, models, cap, chiplet)
    plan = plan_deployment(target, tenants, reservations, mode, reshape=reshape, retarget=retarget, targets=TARGETS)
    assume(not plan.feasible)
    event(f"{len(plan.suggestions)} suggestion(s)")
    assert plan.chosen.conflicts or max(plan.chosen.reserved) > target.available_per_chiplet
    for s in plan.suggestions:
        applied = apply_and_plan(plan, s)
        assert applied.feasible, s.describe()
        assert counts(applied) == counts(s.plan), s.describe()
        if s.kind in ("batch_size", "max_seq_len"):  # min_blocks kept unless the suggestion says otherwise
            before = plan.tenant(s.subject).min_blocks
            minimum = {k: n for k, _, n in s.also}.get("min_blocks", before)
            a = s.plan.assignment(s.subject)
            assert a.lower_bound == max(a.num_min_blocks, minimum or 0), s.describe()
