"""The co-location planner (rbln_build.deploy): hand-computed plans on the tiny recipes, optimality
against a brute-force oracle (tests/deploy_oracle.py), conflicts and verified changes.

What the tiny recipes occupy (the memory model's reports; `rbln-build explain model=<m> device=<d>`),
per chiplet at N blocks, in MiB. Each layer's K and V tensors are rounded up to 2 MiB after scaling,
which makes plateaus:

    on 1 x RBLN-CA25 (one chiplet, 16,096 MiB available):
      tiny_llama (batch 2, 4096 tokens, block 1024; floor 5, full 8):  62 + 8 per 2 blocks
                 N = 5,6: 86   7,8: 94
      tiny_qwen3 (batch 2, 8192 tokens, block 1024; floor 9, full 16): 92 + 12 per 4 blocks
                 N = 9..12: 128   13..16: 140
    on 1 x RBLN-CR03 (chiplets 0..3, 35,840 MiB each):
      tiny_llama N = 5,6: [50, 36, 0, 8]   7,8: [54, 40, 0, 8]
      tiny_qwen3 N = 9..12: [52, 38, 38, 8]   13..16: [56, 42, 42, 8]

A reservation of ``available - cap`` leaves ``cap`` MiB per chiplet to the models.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest
from deploy_oracle import best, need, reserved, resolved
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from memory_helpers import report, spec

from rbln_build.deploy import BLOCKS, BUDGET, Demand, Problem, Reservation, Target, Tenant, plan_deployment
from rbln_build.errors import ConfigError
from rbln_build.estimator import AllocationReport, KVTensor, resolve_attention, resolve_npu

MiB = 2**20
CA, CR = resolve_npu("RBLN-CA25"), resolve_npu("RBLN-CR03")
ATOM, REBEL = Target("atom_max", CA, 1), Target("rebel100", CR, 1)


def tiny(name: str, target: Target, **kw: object) -> Tenant:
    build = {k: kw.pop(k) for k in ("batch_size", "max_seq_len") if k in kw}
    s = spec(name, target.npu.name, target.num_devices, **build)
    rep = report(name, target.npu.name, target.num_devices, **build)
    return Tenant(name, rep, s.attention, options=tuple(sorted(build.items())), **kw)  # type: ignore[arg-type]


def leave(target: Target, cap_mib: int, chiplet: int | None = None) -> Reservation:
    """A reservation that leaves ``cap_mib`` MiB of each chiplet (of ``chiplet`` only, when given)."""
    per_chiplet = target.available_per_chiplet - cap_mib * MiB
    nbytes = per_chiplet if chiplet is not None else per_chiplet * target.num_chiplets
    return Reservation("other", nbytes, chiplet)


def counts(mode_plan) -> dict[str, int]:
    return {a.name: a.kvcache_num_blocks for a in mode_plan.assignments}


def reshape(tenant: Tenant, change: dict[str, int]) -> Tenant:
    """The tenant at another geometry, its report from the memory model (as the build layer does)."""
    options = {**dict(tenant.options), **change}
    changed = tiny(tenant.name, ATOM, **options)
    return replace(changed, weight=tenant.weight, min_blocks=tenant.min_blocks, memory_budget=tenant.memory_budget)


# -- hand-computed plans ---------------------------------------------------------------------------


def test_two_models_fit_and_the_plan_is_optimal() -> None:
    # 226 MiB: (6, 12) = 86 + 128 = 214, (8, 12) = 222 and (6, 16) = 226 fit; (8, 16) = 234 does not.
    # Each gives min share 3/4; weighted sums 3/2, 7/4, 7/4; totals 18, 20, 22 -> (6, 16), headroom 0.
    tenants = [tiny("tiny_llama", ATOM), tiny("tiny_qwen3", ATOM)]
    plan = plan_deployment(ATOM, tenants, [leave(ATOM, 226)])
    assert plan.feasible and counts(plan.budget) == counts(plan.blocks) == {"tiny_llama": 6, "tiny_qwen3": 16}
    llama, qwen = plan.budget.assignments
    assert (llama.memory_budget, llama.budget_bytes) == ("86MB", 90_177_536)
    assert (qwen.memory_budget, qwen.budget_bytes) == ("140MB", 146_800_640)
    assert plan.budget.objective.min_share == Fraction(3, 4)
    assert plan.budget.objective.weighted_share == Fraction(7, 4) and plan.budget.objective.total_blocks == 22
    assert plan.budget.headroom() == (0,) and plan.blocks.headroom() == (0,)
    for mode in (BUDGET, BLOCKS):
        assert best(ATOM, tenants, [leave(ATOM, 226)], mode) == {"tiny_llama": 6, "tiny_qwen3": 16}


@pytest.mark.parametrize(
    ("cap", "weights", "expected"),
    [
        pytest.param(None, (1, 1), {"tiny_llama": 8, "tiny_qwen3": 16}, id="no-reservation-full-pools"),
        pytest.param(226, (1, 1), {"tiny_llama": 6, "tiny_qwen3": 16}, id="226MiB"),
        # (6, 16) = 226 no longer fits; (8, 12) = 222 beats (6, 12) = 214 on the weighted sum (7/4 > 3/2)
        pytest.param(222, (1, 1), {"tiny_llama": 8, "tiny_qwen3": 12}, id="222MiB"),
        # 214 MiB: only the floors' plateaus, (6, 12)
        pytest.param(214, (1, 1), {"tiny_llama": 6, "tiny_qwen3": 12}, id="214MiB"),
        # weight 2 on tiny_llama: (8, 12) scores 2 + 3/4 = 11/4 > (6, 16)'s 2 * 3/4 + 1 = 5/2
        pytest.param(226, (2, 1), {"tiny_llama": 8, "tiny_qwen3": 12}, id="226MiB-weight-llama"),
    ],
)
def test_a_reservation_changes_the_plan(cap, weights, expected) -> None:
    tenants = [
        tiny("tiny_llama", ATOM, weight=Fraction(weights[0])),
        tiny("tiny_qwen3", ATOM, weight=Fraction(weights[1])),
    ]
    reservations = [] if cap is None else [leave(ATOM, cap)]
    plan = plan_deployment(ATOM, tenants, reservations)
    assert counts(plan.budget) == counts(plan.blocks) == expected
    assert best(ATOM, tenants, reservations, BUDGET) == expected


def test_a_reservation_on_one_chiplet_binds_only_that_chiplet_in_both_modes() -> None:
    # 80 MiB left on chiplet 1 only. A budget is not reserved at run time (docs/colocation.md), so
    # both plans charge what the models occupy: (6, 16) = 36 + 42 = 78 MiB on chiplet 1 (and
    # 50 + 56 = 106 on chiplet 0). Each budget is the smallest resolving to its count: 4 x the
    # tightest chiplet, 4 x 50 and 4 x 56 MiB; (8, 16) would need 40 + 42 = 82 on chiplet 1.
    tenants = [tiny("tiny_llama", REBEL), tiny("tiny_qwen3", REBEL)]
    reservations = [leave(REBEL, 80, chiplet=1)]
    plan = plan_deployment(REBEL, tenants, reservations, mode=BUDGET)
    assert counts(plan.budget) == counts(plan.blocks) == {"tiny_llama": 6, "tiny_qwen3": 16}
    assert plan.budget.used() == plan.blocks.used() == tuple(x * MiB for x in (106, 78 + 35_760, 42, 16))
    assert [a.memory_budget for a in plan.budget.assignments] == ["200MB", "224MB"]
    for a in plan.budget.assignments:
        assert resolved(REBEL, plan.tenant(a.name), a.memory_budget).kvcache_num_blocks == a.kvcache_num_blocks
    assert best(REBEL, tenants, reservations, BUDGET) == {"tiny_llama": 6, "tiny_qwen3": 16}


def test_a_budget_plan_only_takes_counts_a_budget_resolves_to() -> None:
    # A made-up report on one RBLN-CR03 (batch 4, 4096 tokens, block 1024: floor 5, full 16). Chiplet 0
    # holds 10 MiB of weights and 1 MiB of KV a block, aligned to 2 MiB: 16 MiB at 5 and 6 blocks. Chiplet
    # 1 holds 2 MiB of KV a block. The tightest chiplet (0) does not grow from 5 to 6 blocks, so a budget
    # that holds 5 blocks holds 6: no budget resolves to 5, while an explicit count can be 5.
    attention = resolve_attention(
        CR, batch_size=4, max_seq_len=4096, attn_impl="flash_attn", kvcache_partition_len=1024
    )
    rep = AllocationReport(
        alloc={"prefill": {"weights": ((10 * MiB, 0, 0, 0),)}},
        kv_tensors={"k0": KVTensor(True, ((MiB, 0, 0, 0),)), "k1": KVTensor(True, ((0, 2 * MiB, 0, 0),))},
    )
    tenant = Tenant("m", rep, attention)
    room = [Reservation("other", REBEL.available_per_chiplet - 12 * MiB, chiplet=1)]  # 6 blocks on chiplet 1
    plan = plan_deployment(REBEL, [tenant], room)
    assert counts(plan.budget) == counts(plan.blocks) == {"m": 6}
    assert plan.budget.assignments[0].memory_budget == "64MB"  # 4 x 16 MiB
    assert resolved(REBEL, tenant, "64MB").kvcache_num_blocks == 6
    tight = [Reservation("other", REBEL.available_per_chiplet - 10 * MiB, chiplet=1)]  # 5 blocks on chiplet 1
    plan = plan_deployment(REBEL, [tenant], tight, mode=BUDGET)
    assert counts(plan.blocks) == {"m": 5} and not plan.budget.feasible
    assert (plan.suggestions[0].kind, counts(plan.suggestions[0].plan)) == ("mode", {"m": 5})
    assert best(REBEL, [tenant], tight, BUDGET) is None and best(REBEL, [tenant], tight, BLOCKS) == {"m": 5}


def test_an_infeasible_pair_gets_the_smallest_fitting_change_verified() -> None:
    # 194 MiB: the floors need 86 + 128 = 214. tiny_llama cannot give enough (batch 1 or 2048 tokens
    # still need 78 + 128 = 206), nor tiny_qwen3's batch 1 (86 + 116 = 202). Shorter tiny_qwen3
    # lengths: 7168..4096 tokens keep its floor's plateau at 116 MiB (202); 3072 tokens (3 blocks a
    # sequence, floor 4) need 104: 86 + 104 = 190 fits, with (6, 4). A reservation 20 MiB smaller fits
    # (the smallest change), and so does either model alone.
    tenants = [tiny("tiny_llama", ATOM), tiny("tiny_qwen3", ATOM)]
    reservations = [leave(ATOM, 194)]
    plan = plan_deployment(ATOM, tenants, reservations, reshape=reshape)
    assert not plan.feasible and plan.chosen.conflict == ("tiny_llama", "tiny_qwen3")
    assert [(c.name, c.alone, c.partners) for c in plan.chosen.conflicts] == [
        ("tiny_llama", False, (("tiny_qwen3",),)),
        ("tiny_qwen3", False, (("tiny_llama",),)),
    ]
    assert (
        "tiny_llama fits alone but not together with tiny_qwen3: their lower bounds (tiny_llama floor of 5 "
        "blocks, tiny_qwen3 floor of 9 blocks) with the reservations (other) do not fit; on chiplet 0 they "
        "need 214 MiB, 20 MiB more than the 194 MiB left by the reservations" in plan.chosen.reason
    )
    old = reservations[0].nbytes
    found = [(s.kind, s.subject, s.old, s.new, s.given_up) for s in plan.suggestions]
    assert found == [
        ("reservation", "other", old, old - 20 * MiB, Fraction(20 * MiB, old)),
        ("max_seq_len", "tiny_qwen3", 8192, 3072, Fraction(5, 8)),
        ("drop_model", "tiny_llama", None, None, Fraction(1)),
        ("drop_model", "tiny_qwen3", None, None, Fraction(1)),
    ]
    assert counts(plan.suggestions[0].plan) == {"tiny_llama": 6, "tiny_qwen3": 12}
    assert plan.suggestions[0].plan.headroom() == (0,)  # the largest reservation that fits leaves nothing
    assert counts(plan.suggestions[1].plan) == {"tiny_llama": 6, "tiny_qwen3": 4}
    # verified: 3072 fits and the next longer length does not
    shorter = [tenants[0], reshape(tenants[1], {"max_seq_len": 3072})]
    longer = [tenants[0], reshape(tenants[1], {"max_seq_len": 4096})]
    assert plan_deployment(ATOM, shorter, reservations).feasible
    assert not plan_deployment(ATOM, longer, reservations).feasible
    assert best(ATOM, shorter, reservations, BUDGET) == {"tiny_llama": 6, "tiny_qwen3": 4}


def test_suggestions_are_ranked_by_what_they_give_up() -> None:
    # 206 MiB (floors 214): tiny_qwen3 at 7168 tokens (86 + 116 = 202, gives up 1/8), tiny_llama at
    # 3072 tokens (78 + 128 = 206, 1/4), either at batch 1 (1/2; listed order breaks the tie), the
    # reservation 8 MiB smaller (a small fraction of it), dropping a model (all of it).
    tenants = [tiny("tiny_llama", ATOM), tiny("tiny_qwen3", ATOM)]
    reservations = [leave(ATOM, 206)]
    plan = plan_deployment(ATOM, tenants, reservations, reshape=reshape)
    found = [(s.kind, s.subject, s.new, s.given_up) for s in plan.suggestions]
    old = reservations[0].nbytes
    assert found == [
        ("reservation", "other", old - 8 * MiB, Fraction(8 * MiB, old)),
        ("max_seq_len", "tiny_qwen3", 7168, Fraction(1, 8)),
        ("max_seq_len", "tiny_llama", 3072, Fraction(1, 4)),
        ("batch_size", "tiny_llama", 1, Fraction(1, 2)),
        ("batch_size", "tiny_qwen3", 1, Fraction(1, 2)),
        ("drop_model", "tiny_llama", None, Fraction(1)),
        ("drop_model", "tiny_qwen3", None, Fraction(1)),
    ]
    for s in plan.suggestions:
        assert s.plan.feasible and min(s.plan.headroom()) >= 0


def test_a_model_that_cannot_fit_even_alone_is_named_alone() -> None:
    tenants = [tiny("tiny_llama", ATOM), tiny("tiny_qwen3", ATOM)]
    plan = plan_deployment(ATOM, tenants, [leave(ATOM, 120)])  # tiny_qwen3's floor alone needs 128
    assert plan.chosen.conflict == ("tiny_qwen3",)
    assert (
        "tiny_qwen3 cannot reach its floor of 9 blocks on atom_max even alone with the reservations (other): "
        "on chiplet 0 it needs 128 MiB, 8 MiB more than the 120 MiB left by the reservations" in plan.chosen.reason
    )


def test_min_blocks_and_a_fixed_budget() -> None:
    # tiny_qwen3 fixed at 130MB resolves 12 blocks and occupies 128 MiB (not its budget); 98 MiB are
    # left for tiny_llama: its 8 blocks need 94. min_blocks 7 on tiny_llama is satisfied by that.
    tenants = [tiny("tiny_llama", ATOM, min_blocks=7), tiny("tiny_qwen3", ATOM, memory_budget="130MB")]
    plan = plan_deployment(ATOM, tenants, [leave(ATOM, 226)])
    assert counts(plan.budget) == {"tiny_llama": 8, "tiny_qwen3": 12}
    fixed = plan.budget.assignment("tiny_qwen3")
    assert fixed.fixed and fixed.memory_budget == "130MB" and fixed.usage == (128 * MiB,)
    # with 220 MiB the fixed model's 128 MiB leave 92 < 94: min_blocks 7 cannot be met; 6 blocks (86)
    # could. No smaller fixed budget helps: tiny_qwen3's floor occupies those 128 MiB already.
    tight = plan_deployment(ATOM, tenants, [leave(ATOM, 220)])
    assert not tight.feasible and tight.chosen.conflict == ("tiny_llama", "tiny_qwen3")
    kinds = {(s.kind, s.subject): s.new for s in tight.suggestions}
    assert kinds[("min_blocks", "tiny_llama")] == 6 and ("memory_budget", "tiny_qwen3") not in kinds


def test_the_shipped_deployment_is_the_optimum_of_its_accounting() -> None:
    # docs/colocation.md section 2: Qwen3-8B (batch 8, 40,960 tokens) and Llama-3.2-1B on one Rebel100,
    # 20 GiB reserved on chiplet 0, planned from the memory model's reports as `rbln-build plan` does.
    # The brute-force oracle, pricing every count by what it occupies, finds the same counts in both
    # modes; one block more for either model does not fit chiplet 0 (22 MiB left).
    tenants = [tiny("qwen3_8b", REBEL, batch_size=8, max_seq_len=40960), tiny("llama3_2_1b", REBEL)]
    reservations = [Reservation("vision_encoder", 20 * 2**30, 0)]
    plan = plan_deployment(REBEL, tenants, reservations)
    for mode_plan in (plan.budget, plan.blocks):
        assert (
            counts(mode_plan)
            == best(REBEL, tenants, reservations, mode_plan.mode)
            == {
                "qwen3_8b": 33,
                "llama3_2_1b": 29,
            }
        )
    assert plan.budget.headroom()[0] == 22 * MiB
    assert [a.memory_budget for a in plan.budget.assignments] == ["56544MB", "11512MB"]
    for a in plan.budget.assignments:
        assert resolved(REBEL, plan.tenant(a.name), a.memory_budget).kvcache_num_blocks == a.kvcache_num_blocks
    base = reserved(REBEL, reservations)
    for i, (t, n) in enumerate(((tenants[0], 34), (tenants[1], 30))):
        other = tenants[1 - i]
        total = [
            r + a + b
            for r, a, b in zip(
                base, need(REBEL, t, n), need(REBEL, other, counts(plan.budget)[other.name]), strict=True
            )
        ]
        assert total[0] > REBEL.available_per_chiplet, (t.name, n)


def test_bad_inputs_are_config_errors() -> None:
    llama = tiny("tiny_llama", ATOM)
    with pytest.raises(ConfigError, match="min_blocks 9 exceeds its full pool"):
        Problem(ATOM, [replace(llama, min_blocks=9)])
    with pytest.raises(ConfigError, match="below its floor"):
        Problem(ATOM, [replace(llama, min_blocks=3)])
    with pytest.raises(ConfigError, match="chiplet 1 does not exist"):
        Problem(ATOM, [llama], [Reservation("x", MiB, chiplet=1)])
    with pytest.raises(ConfigError, match="unique"):
        Problem(ATOM, [llama, llama])
    with pytest.raises(
        ConfigError, match="its report covers 1 device.s. of 1 chiplet.s., but the target is 1 x RBLN-CR03"
    ):
        Problem(REBEL, [llama])  # a report of another target


# -- optimality against brute force ----------------------------------------------------------------


@st.composite
def deployments(draw):
    npu = draw(st.sampled_from([CA, CR]))
    target = Target(npu.name, npu, draw(st.sampled_from([1, 1, 2])))
    C = npu.num_chiplets
    tenants = []
    for i in range(draw(st.integers(1, 3))):
        batch, per_seq = draw(st.integers(1, 3)), draw(st.integers(2, 4))
        attention = resolve_attention(
            npu, batch_size=batch, max_seq_len=1024 * per_seq, attn_impl="flash_attn", kvcache_partition_len=1024
        )
        grid = st.lists(
            st.lists(st.integers(0, 6 * MiB), min_size=C, max_size=C),
            min_size=target.num_devices,
            max_size=target.num_devices,
        )
        kv = {
            f"kv{j}": KVTensor(
                draw(st.sampled_from([True, True, True, False])),
                tuple(
                    tuple(r)
                    for r in draw(
                        st.lists(
                            st.lists(st.integers(0, 3 * MiB), min_size=C, max_size=C),
                            min_size=target.num_devices,
                            max_size=target.num_devices,
                        )
                    )
                ),
            )
            for j in range(draw(st.integers(1, 3)))
        }
        rep = AllocationReport(alloc={"prefill": {"weights": tuple(tuple(r) for r in draw(grid))}}, kv_tensors=kv)
        tenant = Tenant(f"m{i}", rep, attention, weight=Fraction(draw(st.sampled_from([1, 1, 2, 3])), 2))
        if draw(st.booleans()) and attention.num_full_blocks > attention.num_min_blocks:
            tenant = replace(tenant, min_blocks=draw(st.integers(attention.num_min_blocks, attention.num_full_blocks)))
        tenants.append(tenant)
    if len(tenants) > 1 and draw(st.integers(0, 4)) == 0:
        nbytes = draw(st.integers(1, 40)) * MiB * C
        tenants[-1] = replace(tenants[-1], memory_budget=nbytes, min_blocks=None)
    floors = [max(need(target, t, t.attention.num_min_blocks)) for t in tenants]
    fulls = [max(need(target, t, t.attention.num_full_blocks)) for t in tenants]
    cap = draw(st.integers(sum(floors) * 9 // 10, sum(fulls) + 4 * MiB))
    chiplet = draw(st.sampled_from([None, *range(C)]))
    return target, tenants, [leave_bytes(target, cap, chiplet)]


def leave_bytes(target: Target, cap: int, chiplet: int | None) -> Reservation:
    per_chiplet = target.available_per_chiplet - cap
    return Reservation("other", per_chiplet if chiplet is not None else per_chiplet * target.num_chiplets, chiplet)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deployments())
def test_the_planner_matches_brute_force(case) -> None:
    target, tenants, reservations = case
    plan = plan_deployment(target, tenants, reservations)
    for mode_plan in (plan.budget, plan.blocks):
        expected = best(target, tenants, reservations, mode_plan.mode)
        if expected is None:
            assert not mode_plan.feasible and mode_plan.conflict is not None
            continue
        assert mode_plan.feasible and counts(mode_plan) == expected
        # independently: at the planned counts, what every model occupies plus the reservations fits
        # every (node, chiplet)
        occupied = [need(target, plan.tenant(a.name), a.kvcache_num_blocks) for a in mode_plan.assignments]
        totals = [sum(col) for col in zip(reserved(target, reservations), *occupied, strict=True)]
        assert max(totals) <= target.available_per_chiplet
        for a, used in zip(mode_plan.assignments, occupied, strict=True):
            assert list(a.usage) == used
            if mode_plan.mode == BUDGET:  # each budget resolves, through the estimator, to its count
                assert resolved(target, plan.tenant(a.name), a.memory_budget).kvcache_num_blocks == a.kvcache_num_blocks


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deployments())
def test_the_budget_that_serves_a_count_is_the_smallest_resolving_to_it(case) -> None:
    # Demand.budget_for gives serve-command the budget that reproduces a built count (blocks mode): the
    # estimator resolves it to exactly that count, one byte less resolves to fewer blocks, and it is
    # None exactly where no budget resolves to the count (the tightest chiplet does not grow at the
    # next count, so a budget that holds it holds one more) or none fits the device at all.
    target, tenants, _ = case
    C = target.num_chiplets
    for t in tenants:
        demand = Demand(t, target)
        for n in range(t.floor, t.full + 1):
            tightest = max(need(target, t, n))
            plateau = n < t.full and max(need(target, t, n + 1)) == tightest
            budget = demand.budget_for(n)
            if plateau or tightest * C > target.npu.available_bytes:
                event("a count no budget resolves to")
                assert budget is None, (t.name, n)
                continue
            assert budget == max(tightest, 1) * C, (t.name, n)
            assert resolved(target, t, budget).kvcache_num_blocks == n, (t.name, n)
            if tightest > 0:  # a model of no bytes resolves any positive budget to its full pool
                assert resolved(target, t, budget - 1).kvcache_num_blocks != n, (t.name, n)
