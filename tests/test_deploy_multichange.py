"""When no single change fits, the suggestions drop two models (every pair), each verified by
planning again, and the printed overrides apply it."""

from __future__ import annotations

from fractions import Fraction

from rbln_build.deploy import Target, Tenant, plan_deployment
from rbln_build.estimator import AllocationReport, KVTensor, resolve_attention, resolve_npu

MiB = 2**20
CA = resolve_npu("RBLN-CA25")
ATOM = Target("atom_max", CA, 1)


def heavy(name: str) -> Tenant:
    """A made-up model of 9,000 MiB of weights on one RBLN-CA25 (16,096 MiB): any two overflow it."""
    attention = resolve_attention(
        CA, batch_size=1, max_seq_len=2048, attn_impl="flash_attn", kvcache_partition_len=1024
    )
    rep = AllocationReport(
        alloc={"prefill": {"weights": ((9000 * MiB,),)}}, kv_tensors={"k": KVTensor(True, ((2 * MiB,),))}
    )
    return Tenant(name, rep, attention)


def test_three_models_of_which_only_one_fits_get_the_pairs_dropped() -> None:
    tenants = [heavy("a"), heavy("b"), heavy("c")]
    plan = plan_deployment(ATOM, tenants)
    assert not plan.feasible
    found = [(s.kind, s.subject, s.given_up) for s in plan.suggestions]
    assert found == [
        ("drop_models", "a+b", Fraction(2)),
        ("drop_models", "a+c", Fraction(2)),
        ("drop_models", "b+c", Fraction(2)),
    ]
    assert [s.describe() for s in plan.suggestions][0] == "drop models a and b"
    assert [[a.name for a in s.plan.assignments] for s in plan.suggestions] == [["c"], ["b"], ["a"]]
    for s in plan.suggestions:
        kept = [t for t in tenants if t.name not in s.subject.split("+")]
        assert plan_deployment(ATOM, kept).feasible and min(s.plan.headroom()) >= 0


def test_the_printed_overrides_keep_the_other_models(tmp_path) -> None:
    from rbln_build.colocation import overrides_for
    from rbln_build.config._config import compose_settings
    from rbln_build.deploy import Suggestion

    base = [
        "deployment=tiny_pair",
        "deployment.models=[{model:tiny_llama},{model:tiny_qwen3},{model:tiny_llama,name:second,batch_size:1}]",
        f"build_dir={tmp_path}",
    ]
    d = compose_settings(base).deployment
    plan = plan_deployment(ATOM, [heavy("x")])  # any plan: the overrides depend on the kind and subject only
    drop = Suggestion("drop_models", "tiny_llama+tiny_qwen3", None, None, Fraction(2), plan.chosen)
    printed = overrides_for(d)(drop)
    assert printed == ["deployment.models=[{model:tiny_llama,name:second,batch_size:1,port:8102}]"]
    kept = compose_settings([*base, *printed]).deployment
    assert [(m.name, m.batch_size, m.port) for m in kept.models] == [("second", 1, 8102)]
