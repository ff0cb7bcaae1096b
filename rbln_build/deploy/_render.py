"""A deployment plan as deterministic JSON and as text tables (``plan`` and ``explain``).

Per-chiplet tables have one row per (device, chiplet) and one column per model, then the
reservations, the total, what the chiplet offers and the headroom. Byte values are printed in MiB
(two decimals when not whole); the JSON carries exact bytes.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from typing import Any

from ._inputs import Margin
from ._modeplan import ModePlan
from ._plan import MEASURE, DeploymentPlan, Suggestion
from ._planner import ACCOUNTING, BLOCKS, BUDGET, OBJECTIVE, SEARCH

__all__ = ["plan_json", "render_plan", "render_chiplets", "mib"]

MiB = 2**20


def mib(n: int) -> str:
    return f"{n // MiB:,}" if n % MiB == 0 else f"{n / MiB:,.2f}"


def _mode_json(plan: DeploymentPlan, mp: ModePlan) -> dict[str, Any]:
    grid = mp.target.grid
    out: dict[str, Any] = {
        "feasible": mp.feasible,
        "objective": None if mp.objective is None else mp.objective.to_json(),
        "conflict": list(mp.conflict),
        "conflicts": [
            {"model": c.name, "alone": c.alone, "partners": [list(p) for p in c.partners], "reason": c.reason}
            for c in mp.conflicts
        ],
        "reason": mp.reason,
        "search_nodes": mp.nodes,
        "solver": mp.proof.to_json(),
        "models": {},
        "per_chiplet": None,
    }
    if not mp.feasible:
        return out
    for a in mp.assignments:
        out["models"][a.name] = {
            "fixed": a.fixed,
            "kvcache_num_blocks": a.kvcache_num_blocks,
            "num_full_blocks": a.num_full_blocks,
            "share": float(a.share),
            "memory_budget": a.memory_budget,
            "budget_bytes": a.budget_bytes,
            "budget_fraction": a.budget_fraction,
            "usage": [list(r) for r in grid(a.usage)],
        }
    out["per_chiplet"] = {
        "available": mp.target.available_per_chiplet,
        "reserved": [list(r) for r in grid(mp.reserved)],
        "margin": [list(r) for r in grid(mp.held())],
        "used": [list(r) for r in grid(mp.used())],
        "headroom": [list(r) for r in grid(mp.headroom())],
    }
    return out


Overrides = Callable[[Suggestion], Sequence[str]]


def _margin_json(m: Margin) -> dict[str, Any]:
    return {"bytes": m.nbytes, "fraction": float(m.fraction)}


def _margins_json(plan: DeploymentPlan) -> dict[str, Any]:
    return {
        "deployment": _margin_json(plan.margins.default),
        "devices": {str(n): _margin_json(m) for n, m in plan.margins.devices},
    }


def _suggestion_json(s: Suggestion, overrides: Overrides | None) -> dict[str, Any]:
    return {
        "kind": s.kind,
        "subject": s.subject,
        "old": s.old,
        "new": s.new,
        "also": [{"key": k, "old": o, "new": n} for k, o, n in s.also],
        "given_up": float(s.given_up),
        "description": s.describe(),
        "overrides": None if overrides is None else list(overrides(s)),
        "device": s.plan.target.name,
        "plan": {a.name: a.kvcache_num_blocks for a in s.plan.assignments},
        "parts": [
            {"kind": p.kind, "subject": p.subject, "old": p.old, "new": p.new, "also": [list(a) for a in p.also]}
            for p in s.parts
        ],
    }


def plan_json(
    plan: DeploymentPlan, name: str, sources: dict[str, str] | None = None, overrides: Overrides | None = None
) -> dict[str, Any]:
    """The whole plan as a plain, deterministic JSON value (what ``plan --json`` prints)."""
    t = plan.target
    return {
        "deployment": name,
        "target": {
            "device": t.name,
            "npu": t.npu.name,
            "product": t.npu.product,
            "num_devices": t.num_devices,
            "num_chiplets": t.num_chiplets,
            "available_per_chiplet": t.available_per_chiplet,
            "available_per_device": t.npu.available_bytes,
        },
        "objective": OBJECTIVE,
        "accounting": ACCOUNTING,
        "mode": plan.mode,
        "feasible": plan.feasible,
        "models": [
            {
                "name": x.name,
                "report": (sources or {}).get(x.name, x.source),
                "batch_size": x.attention.batch_size,
                "max_seq_len": x.attention.max_seq_len,
                "kvcache_block_size": x.attention.kvcache_block_size,
                "num_full_blocks": x.full,
                "num_min_blocks": x.floor,
                "lower_bound": x.lower_bound,
                "weight": float(x.weight),
                "fixed_memory_budget": x.memory_budget,
                "traffic_blocks": x.traffic_blocks,
            }
            for x in plan.tenants
        ],
        "reservations": [{"name": r.name, "bytes": r.nbytes, "chiplet": r.chiplet} for r in plan.reservations],
        "margin": _margins_json(plan),
        "plans": {BUDGET: _mode_json(plan, plan.budget), BLOCKS: _mode_json(plan, plan.blocks)},
        "suggestions": [_suggestion_json(s, overrides) for s in plan.suggestions],
        "fits_alone_on": {n: list(where) for n, where in plan.elsewhere},
        "suggestion_measure": MEASURE,
        "combination_search": None
        if plan.combined is None
        else {"plans": plan.combined[0], "limit": plan.combined[1], "complete": plan.combined[0] < plan.combined[1]},
    }


def _table(rows: Sequence[tuple[str, ...]], right: frozenset[int] | set[int] = frozenset()) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def fmt(r: tuple[str, ...]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()

    return [fmt(rows[0]), "  ".join("-" * w for w in widths), *(fmt(r) for r in rows[1:])]


def render_chiplets(mp: ModePlan) -> list[str]:
    """One row per (device, chiplet), one column per model (what it occupies at its count), then the
    reservations, the total, the margin (when there is one), the chiplet's available DRAM and the
    headroom that is left once the margin is held (MiB)."""
    t = mp.target
    names = [a.name for a in mp.assignments]
    cols = [a.usage for a in mp.assignments]
    total = mp.used()
    margin, headroom = mp.held(), mp.headroom()
    shown = any(margin)
    header = ("MiB", *names, "reserved", "total", *(("margin",) if shown else ()), "available", "headroom")
    rows: list[tuple[str, ...]] = [header]
    for k, (node, chiplet) in enumerate(t.buckets()):
        label = f"chiplet {chiplet}" if t.num_devices == 1 else f"device {node} chiplet {chiplet}"
        rows.append(
            (
                label,
                *(mib(c[k]) for c in cols),
                mib(mp.reserved[k]),
                mib(total[k]),
                *((mib(margin[k]),) if shown else ()),
                mib(t.available_per_chiplet),
                mib(headroom[k]),
            )
        )
    return _table(rows, right=set(range(1, len(header))))


def render_plan(
    plan: DeploymentPlan, name: str, sources: dict[str, str] | None = None, overrides: Overrides | None = None
) -> str:
    """The plan as text; ``overrides`` gives each suggestion as the command-line overrides that apply it."""
    t = plan.target
    out = [
        f"deployment {name} on {t.name}: {t.num_devices} x {t.npu.name} ({t.npu.product}), {t.num_chiplets} "
        f"chiplet(s) per device, {t.available_per_chiplet:,} B ({mib(t.available_per_chiplet)} MiB) available per chiplet",
        f"objective: {OBJECTIVE}",
        f"accounting: {ACCOUNTING}",
    ]
    for r in plan.reservations:
        where = "spread evenly" if r.chiplet is None else f"on chiplet {r.chiplet}"
        out.append(f"reserved: {r.name}, {r.nbytes:,} B per device ({where})")
    for x in plan.tenants:
        if x.traffic is not None:
            out.append(
                f"traffic: {x.name} needs {x.traffic_blocks} blocks ({x.traffic.describe(x.attention)}), "
                "met before the rest is shared"
            )
    if plan.margins:
        per_device = "".join(f"; device {n}: {m.describe()}" for n, m in plan.margins.devices)
        out.append(
            f"margin: {plan.margins.default.describe()}{per_device}, held back on every chiplet in every fit check"
        )
    out.append("")
    rows: list[tuple[str, ...]] = [
        ("model", "report", "batch", "max_seq_len", "block", "floor", "full", "lower bound", "weight", "fixed budget")
    ]
    for x in plan.tenants:
        rows.append(
            (
                x.name,
                (sources or {}).get(x.name, x.source),
                str(x.attention.batch_size),
                str(x.attention.max_seq_len),
                str(x.attention.kvcache_block_size),
                str(x.floor),
                str(x.full),
                str(x.lower_bound),
                f"{float(x.weight):g}",
                "-" if x.memory_budget is None else repr(x.memory_budget),
            )
        )
    out += _table(rows, right={2, 3, 4, 5, 6, 7, 8})
    for mp in (plan.budget, plan.blocks):
        out.append("")
        built = " (what `rbln-build deployment=" + name + "` builds)" if mp.mode == plan.mode else ""
        title = (
            "budget plan: the smallest memory_budget per model that resolves to its count"
            if mp.mode == BUDGET
            else ("blocks plan: explicit kvcache_num_blocks per model, nothing split")
        )
        if not mp.feasible:
            if mp.conflicts:
                out.append(f"{title}{built}: DOES NOT FIT; {len(mp.conflicts)} model(s) cannot fit:")
                out += [f"  {c.reason}." for c in mp.conflicts]
            else:
                out.append(f"{title}{built}: DOES NOT FIT: {mp.reason}.")
            continue
        assert mp.objective is not None
        out.append(
            f"{title}{built}: fits; smallest share {float(mp.objective.min_share):.4f}, "
            f"{mp.objective.total_blocks} blocks in total"
            + ("" if mp.proof.solver == SEARCH else f"; solved by CP-SAT (OR-Tools): {mp.proof.note}")
        )
        if mp.mode == BUDGET:
            rows = [("model", "memory_budget", "bytes per device", "fraction", "kvcache_num_blocks", "share")]
            for a in mp.assignments:
                rows.append(
                    (
                        a.name + (" (fixed)" if a.fixed else ""),
                        repr(a.memory_budget) if a.fixed else str(a.memory_budget),
                        f"{a.budget_bytes:,}",
                        f"{a.budget_fraction:.6f}" if a.budget_fraction is not None else "-",
                        str(a.kvcache_num_blocks),
                        f"{a.kvcache_num_blocks}/{a.num_full_blocks}",
                    )
                )
            out += _table(rows, right={2, 3, 4})
        else:
            rows = [("model", "kvcache_num_blocks", "share", "vs budget plan")]
            for a in mp.assignments:
                other = plan.budget.assignment(a.name).kvcache_num_blocks if plan.budget.feasible else None
                delta = "-" if other is None else f"{a.kvcache_num_blocks - other:+d}"
                rows.append(
                    (
                        a.name + (" (fixed)" if a.fixed else ""),
                        str(a.kvcache_num_blocks),
                        f"{a.kvcache_num_blocks}/{a.num_full_blocks}",
                        delta,
                    )
                )
            out += _table(rows, right={1, 3})
        out.append("per chiplet, what each model occupies:")
        out += ["  " + line for line in render_chiplets(mp)]
    for model, targets in plan.elsewhere:
        out.append("")
        places = ", ".join(targets) if targets else "none of the other device targets"
        out.append(f"{model} cannot fit even alone on {plan.target.name}; alone it fits on: {places}.")
    if plan.combined is not None:
        plans, limit = plan.combined
        out.append("")
        out.append(
            f"no single change fits; pairs of changes searched with {plans} plan(s) of at most {limit}"
            + (" (the bound: more pairs may fit)" if plans >= limit else "")
            + (": none fits." if not plan.suggestions else ".")
        )
    if plan.suggestions:
        out.append("")
        out.append(f"changes that fit, each verified by planning again (smallest first; {MEASURE}):")
        for s in plan.suggestions:
            counts = ", ".join(f"{a.name} {a.kvcache_num_blocks}" for a in s.plan.assignments)
            out.append(f"  {s.describe()}: gives up {float(s.given_up):.4f}; plan: {counts}")
            if overrides is not None:
                out.append(f"      {' '.join(shlex.quote(o) for o in overrides(s))}")
    elif not plan.feasible and plan.combined is None:
        out.append("")
        out.append(
            "no single change found that fits (device, batch_size, max_seq_len, min_blocks, a fixed budget, "
            "a reservation, a model)."
        )
    return "\n".join(out) + "\n"
