"""A brute-force oracle for the co-location planner, independent of its internals.

It enumerates every count of every planned model (every one from the lower bound to the full pool,
no plateau skipping), prices each with the estimator's public functions (``non_kv_per_chiplet``,
``kv_bytes_at``, ``estimate``), keeps the combinations that fit, and returns the best one under the
documented objective: (smallest share, weighted sum of shares, total blocks, counts in listed order).

Every model is charged what it occupies at its count on every (node, chiplet): its non-KV bytes plus
its KV pool (a memory_budget only steers the block estimate at compile time; docs/colocation.md).
Budget plans can only give a count some budget resolves to: for each n the oracle tries the smallest
even split that holds n on its tightest chiplet (``num_chiplets * max need``) and takes the count
``estimate`` resolves from it (the smallest budget for a count is that one, so this finds them all).
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

from rbln_build.deploy import Reservation, Target, Tenant
from rbln_build.estimator import Request, estimate, kv_bytes_at


def need(target: Target, tenant: Tenant, n: int) -> list[int]:
    non_kv = tenant.report.non_kv_per_chiplet()
    kv = kv_bytes_at(tenant.report, n)
    return [non_kv.get(b, 0) + kv.get(b, 0) for b in target.buckets()]


def reserved(target: Target, reservations: list[Reservation]) -> list[int]:
    C = target.num_chiplets
    out = []
    for _, c in target.buckets():
        total = 0
        for r in reservations:
            if r.chiplet is None:
                total += -(-r.nbytes // C)
            elif r.chiplet == c:
                total += r.nbytes
        out.append(total)
    return out


def resolved(target: Target, tenant: Tenant, budget: object) -> Any:
    request = Request.for_attention(
        target.npu.name,
        target.num_devices,
        tenant.attention,
        memory_budget=budget,
        current_blocks=tenant.report.current_blocks,
    )
    return estimate(request, tenant.report)


def traffic_blocks(tenant: Tenant) -> int:
    """What its traffic needs, from the documented rule: sequences (concurrent, or requests/s x seconds
    per request rounded up) x blocks per sequence (prompt + output tokens, default max_seq_len, over the
    block size, rounded up)."""
    t = tenant.traffic
    if t is None:
        return 0
    if t.concurrent_sequences is not None:
        sequences = t.concurrent_sequences
    else:
        product = t.requests_per_s * t.seconds_per_request
        sequences = max(-(-product.numerator // product.denominator), 1)
    tokens = tenant.attention.max_seq_len
    if t.prompt_tokens is not None or t.output_tokens is not None:
        tokens = (t.prompt_tokens or 0) + (t.output_tokens or 0)
    return sequences * -(-tokens // tenant.attention.kvcache_block_size)


def choices(target: Target, tenant: Tenant, mode: str) -> list[tuple[int, list[int]]]:
    C = target.num_chiplets
    full, floor = tenant.attention.num_full_blocks, tenant.attention.num_min_blocks
    if tenant.memory_budget is not None:
        res = resolved(target, tenant, tenant.memory_budget)
        if not res.ok:
            return []
        count = res.kvcache_num_blocks
        return [(count, need(target, tenant, count))]
    lower = (
        full if tenant.attention.attn_impl == "eager" else max(floor, tenant.min_blocks or 0, traffic_blocks(tenant))
    )
    out = []
    for n in range(lower, full + 1):
        if mode == "blocks":
            out.append((n, need(target, tenant, n)))
            continue
        budget = C * max(1, *need(target, tenant, n))  # the estimator takes no zero budget
        if budget > target.npu.available_bytes:
            continue
        res = resolved(target, tenant, budget)
        if res.ok and all(count != res.kvcache_num_blocks for count, _ in out):
            out.append((res.kvcache_num_blocks, need(target, tenant, res.kvcache_num_blocks)))
    return out


def best(
    target: Target,
    tenants: list[Tenant],
    reservations: list[Reservation],
    mode: str,
    margin: list[int] | None = None,
) -> dict[str, int] | None:
    """The optimal counts by name, or None when nothing fits. ``margin``: bytes held back on every
    (node, chiplet), node-major (charged like a reservation)."""
    base = reserved(target, reservations)
    if margin is not None:
        base = [b + m for b, m in zip(base, margin, strict=True)]
    available = target.available_per_chiplet
    options = [choices(target, t, mode) for t in tenants]
    top: tuple[Any, ...] | None = None
    answer = None
    for combo in itertools.product(*options):
        total = list(base)
        for _, charge in combo:
            total = [a + b for a, b in zip(total, charge, strict=True)]
        if any(x > available for x in total):
            continue
        planned = [(t, n) for t, (n, _) in zip(tenants, combo, strict=True) if t.memory_budget is None]
        shares = [Fraction(n, t.attention.num_full_blocks) for t, n in planned]
        key = (
            min(shares, default=Fraction(1)),
            sum((t.weight * s for (t, _), s in zip(planned, shares, strict=True)), Fraction(0)),
            sum(n for _, n in planned),
            tuple(n for _, n in planned),
        )
        if top is None or key > top:
            top, answer = key, {t.name: n for t, (n, _) in zip(tenants, combo, strict=True)}
    return answer


def held(target: Target, margins: Any) -> list[int]:
    """The margin per (node, chiplet), from its definition (bytes, or a fraction rounded up)."""
    out = []
    for node, _ in target.buckets():
        m = dict(margins.devices).get(node, margins.default)
        out.append(m.nbytes + -(-m.fraction.numerator * target.available_per_chiplet // m.fraction.denominator))
    return out


def best_server(
    target: Target,
    cards: list[tuple[list[Reservation], Any]],
    tenants: list[Tenant],
    mode: str,
    pins: dict[str, int] | None = None,
) -> tuple[dict[str, int], dict[str, int]] | None:
    """A server's optimal (counts, cards) by name, or None when nothing fits: every model on one card
    of ``cards`` (each (reservations, margins)) it may use, every (card, count) combination tried.
    The objective is the documented one, then each model's card in listed order, lower first."""
    pins = pins or {}
    held_by = [
        [r + m for r, m in zip(reserved(target, res), held(target, margins), strict=True)] for res, margins in cards
    ]
    available = target.available_per_chiplet
    per_model = []
    for t in tenants:
        allowed = [pins[t.name]] if t.name in pins else range(len(cards))
        per_model.append([(k, n, charge) for k in allowed for n, charge in choices(target, t, mode)])
    top: tuple[Any, ...] | None = None
    answer = None
    for combo in itertools.product(*per_model):
        totals = [list(h) for h in held_by]
        for k, _, charge in combo:
            totals[k] = [a + b for a, b in zip(totals[k], charge, strict=True)]
        if any(x > available for total in totals for x in total):
            continue
        planned = [(t, n) for t, (_, n, _) in zip(tenants, combo, strict=True) if t.memory_budget is None]
        shares = [Fraction(n, t.attention.num_full_blocks) for t, n in planned]
        key = (
            min(shares, default=Fraction(1)),
            sum((t.weight * s for (t, _), s in zip(planned, shares, strict=True)), Fraction(0)),
            sum(n for _, n in planned),
            tuple(n for _, n in planned),
            tuple(-k for k, _, _ in combo),
        )
        if top is None or key > top:
            top = key
            answer = (
                {t.name: n for t, (_, n, _) in zip(tenants, combo, strict=True)},
                {t.name: k for t, (k, _, _) in zip(tenants, combo, strict=True)},
            )
    return answer
