"""What the planner takes, and what one model occupies per (node, chiplet) at N blocks.

* ``Target``: one device target (an NPU and how many of them form the tensor-parallel group). Each
  (node, chiplet) offers ``npu.available_per_chiplet`` bytes: the DRAM a budget of 100% splits.
* ``Tenant``: one model that shares the target: its AllocationReport, its resolved attention options
  (hence its floor and full pool), and what the deployment asks of it (a weight, a minimum block
  count, or a fixed ``memory_budget`` that takes it out of the planning).
* ``Reservation``: bytes per device held for something that is not one of the models (a vision
  encoder, room for a later batch increase), on one chiplet or spread evenly over all of them.
* ``Margins``: bytes held back on every chiplet for what the numbers do not know (the reports are
  estimates until the real compiler runs; the runtime's own per-process memory is not in them): one
  margin for the deployment, and one per device (node) of the target that replaces it there; each is
  bytes per chiplet or a fraction of the chiplet's available DRAM, rounded up to a whole byte.
* ``Traffic``: what a model must serve at once (concurrent sequences, or requests/s times seconds per
  request, Little's law), and how long a sequence is (prompt plus output tokens; default its
  ``max_seq_len``): the blocks it needs, which the plan meets before it shares the rest.
* ``Demand``: a tenant's bytes on every (node, chiplet) at every count from 0 to its full pool,
  computed once with the estimator's own arithmetic (``rbln_build.estimator``: non-KV bytes per
  chiplet, each KV tensor scaled to N blocks and rounded up to 2 MiB *after* scaling).

Pure: no torch, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from ..errors import ConfigError
from ..estimator import AllocationReport, AttentionConfig, NpuTarget, Request, estimate, kv_bytes_at, resolve_budget

__all__ = ["Grid", "Target", "Tenant", "Reservation", "Margin", "Margins", "NO_MARGIN", "Traffic", "Demand", "ceil_div"]

Grid = tuple[tuple[int, ...], ...]  # [node][chiplet] -> bytes


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Target:
    """The device target every tenant shares (``name`` is its conf/device option)."""

    name: str
    npu: NpuTarget
    num_devices: int = 1

    @property
    def num_chiplets(self) -> int:
        return self.npu.num_chiplets

    @property
    def available_per_chiplet(self) -> int:
        return self.npu.available_per_chiplet

    def buckets(self) -> tuple[tuple[int, int], ...]:
        """Every (node, chiplet), node-major: the order of every flat per-chiplet vector here."""
        return tuple((n, c) for n in range(self.num_devices) for c in range(self.num_chiplets))

    def grid(self, flat: tuple[int, ...] | list[int]) -> Grid:
        """A flat per-bucket vector laid out as [[bytes per chiplet] per node]."""
        c = self.num_chiplets
        return tuple(tuple(flat[n * c : (n + 1) * c]) for n in range(self.num_devices))


@dataclass(frozen=True)
class Reservation:
    """``nbytes`` per device for a tenant that is not an LLM, on ``chiplet`` of every device, or
    (``chiplet`` None) spread evenly over the chiplets, each share rounded up to a whole byte."""

    name: str
    nbytes: int
    chiplet: int | None = None

    def per_chiplet(self, num_chiplets: int) -> tuple[int, ...]:
        if self.chiplet is None:
            return (ceil_div(self.nbytes, num_chiplets),) * num_chiplets
        return tuple(self.nbytes if c == self.chiplet else 0 for c in range(num_chiplets))


@dataclass(frozen=True)
class Margin:
    """Bytes held back on every chiplet: ``nbytes``, plus ``fraction`` of the chiplet's available
    DRAM rounded up (the config gives one or the other)."""

    nbytes: int = 0
    fraction: Fraction = Fraction(0)

    def on(self, available: int) -> int:
        return self.nbytes + ceil_div(self.fraction.numerator * available, self.fraction.denominator)

    def describe(self) -> str:
        if self.fraction:
            return f"{float(self.fraction):g} of each chiplet"
        return f"{self.nbytes:,} B per chiplet"


@dataclass(frozen=True)
class Margins:
    """The deployment's margin, and per device (node index of the target) a margin that replaces it
    there. A device index the target does not have is ignored (a suggestion that moves the deployment
    to a target with fewer devices keeps the deployment's margin)."""

    default: Margin = Margin()
    devices: tuple[tuple[int, Margin], ...] = ()

    def of(self, node: int) -> Margin:
        return dict(self.devices).get(node, self.default)

    def per_bucket(self, target: Target) -> tuple[int, ...]:
        """Bytes held back on every (node, chiplet), node-major."""
        return tuple(self.of(n).on(target.available_per_chiplet) for n, _ in target.buckets())

    def __bool__(self) -> bool:
        return self.default != Margin() or any(m != Margin() for _, m in self.devices)


NO_MARGIN = Margins()


@dataclass(frozen=True)
class Traffic:
    """What a model must hold at once: ``concurrent_sequences``, or ``requests_per_s`` x
    ``seconds_per_request`` (Little's law, rounded up); each sequence ``prompt_tokens`` +
    ``output_tokens`` long (default: the model's ``max_seq_len``)."""

    concurrent_sequences: int | None = None
    requests_per_s: Fraction | None = None
    seconds_per_request: Fraction | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None

    def sequences(self) -> int:
        if self.concurrent_sequences is not None:
            return self.concurrent_sequences
        assert self.requests_per_s is not None and self.seconds_per_request is not None
        product = self.requests_per_s * self.seconds_per_request
        return max(ceil_div(product.numerator, product.denominator), 1)

    def tokens(self, attention: AttentionConfig) -> int:
        if self.prompt_tokens is None and self.output_tokens is None:
            return attention.max_seq_len
        return (self.prompt_tokens or 0) + (self.output_tokens or 0)

    def blocks(self, attention: AttentionConfig) -> int:
        """The KV blocks it needs: sequences x blocks a sequence of its tokens takes."""
        return self.sequences() * ceil_div(self.tokens(attention), attention.kvcache_block_size)

    def describe(self, attention: AttentionConfig) -> str:
        if self.concurrent_sequences is not None:
            seqs = f"{self.sequences()} concurrent sequence(s)"
        else:
            seqs = (
                f"{self.sequences()} concurrent sequence(s) ({float(self.requests_per_s or 0):g} requests/s x "
                f"{float(self.seconds_per_request or 0):g} s)"
            )
        per = ceil_div(self.tokens(attention), attention.kvcache_block_size)
        return f"{seqs} of {self.tokens(attention)} tokens, {per} block(s) of {attention.kvcache_block_size} each"


@dataclass(frozen=True)
class Tenant:
    """One model of a deployment. ``memory_budget`` (any form the estimator takes) fixes its budget:
    it is then not planned, only accounted for. ``source`` says where ``report`` came from."""

    name: str
    report: AllocationReport
    attention: AttentionConfig
    weight: Fraction = Fraction(1)
    min_blocks: int | None = None
    memory_budget: object = None
    source: str = ""
    options: tuple[tuple[str, object], ...] = field(default=(), compare=False)  # what reshaping may change
    traffic: Traffic | None = None  # what it must serve: its blocks are met before the rest is shared

    @property
    def full(self) -> int:
        return self.attention.num_full_blocks

    @property
    def floor(self) -> int:
        return self.attention.num_min_blocks

    @property
    def fixed(self) -> bool:
        return self.memory_budget is not None

    @property
    def eager(self) -> bool:
        return self.attention.attn_impl == "eager"

    @property
    def traffic_blocks(self) -> int | None:
        return None if self.traffic is None else self.traffic.blocks(self.attention)

    @property
    def lower_bound(self) -> int:
        """The fewest blocks this tenant may get: the floor, raised to ``min_blocks`` and to what its
        traffic needs; under eager attention an unset count is always the full pool, its only count."""
        if self.eager:
            return self.full
        return max(self.floor, self.min_blocks or 0, self.traffic_blocks or 0)


class Demand:
    """A tenant's bytes on every (node, chiplet) of a target at every count 0..full pool."""

    def __init__(self, tenant: Tenant, target: Target) -> None:
        self.tenant = tenant
        self.target = target
        _check(tenant, target)
        report = tenant.report
        buckets = target.buckets()
        non_kv = report.non_kv_per_chiplet()
        self.table: tuple[tuple[int, ...], ...] = tuple(
            tuple(non_kv.get(b, 0) + kv.get(b, 0) for b in buckets)
            for kv in (kv_bytes_at(report, n) for n in range(tenant.full + 1))
        )

    def need(self, num_blocks: int) -> tuple[int, ...]:
        """Bytes per bucket (flat, node-major) at ``num_blocks``."""
        return self.table[num_blocks]

    def slice(self, num_blocks: int) -> int:
        """The smallest even per-chiplet share of a budget that holds ``num_blocks``: what its
        tightest chiplet needs (``memory_budget = slice * num_chiplets`` bytes per device)."""
        return max(self.table[num_blocks])

    def max_blocks(self, per_chiplet: int) -> int:
        """Largest count <= full pool whose every bucket fits ``per_chiplet`` (0: none)."""
        best = 0
        for n in range(1, self.tenant.full + 1):
            if self.slice(n) <= per_chiplet:
                best = n
            else:
                break
        return best

    def budget_for(self, num_blocks: int) -> int | None:
        """The smallest ``memory_budget`` (bytes per device) that the estimator resolves to exactly
        ``num_blocks``, checked through the estimator; None when none does (the tightest chiplet does not
        grow at the next count, so a budget that holds this count holds the next one too)."""
        nbytes = max(self.slice(num_blocks), 1) * self.target.num_chiplets
        if nbytes > self.target.npu.available_bytes:
            return None
        t = self.tenant
        request = Request.for_attention(
            self.target.npu.name,
            self.target.num_devices,
            t.attention,
            memory_budget=nbytes,
            current_blocks=t.report.current_blocks,
        )
        return nbytes if estimate(request, t.report).kvcache_num_blocks == num_blocks else None

    def fixed_budget_bytes(self) -> int:
        """The fixed ``memory_budget`` in bytes per device (raises EstimateError for a bad one)."""
        return resolve_budget(self.tenant.memory_budget, self.target.npu)


def _check(tenant: Tenant, target: Target) -> None:
    """The report must describe this target (shape, current_blocks): asked of the estimator itself."""
    if tenant.min_blocks is not None and not tenant.eager:
        if tenant.min_blocks > tenant.full:
            raise ConfigError(
                f"deployment model {tenant.name}: min_blocks {tenant.min_blocks} exceeds its full pool "
                f"({tenant.full} blocks = max_seq_len // kvcache_block_size * batch_size); lower it."
            )
        if tenant.min_blocks < tenant.floor:
            raise ConfigError(
                f"deployment model {tenant.name}: min_blocks {tenant.min_blocks} is below its floor "
                f"({tenant.floor} blocks), which always applies; remove min_blocks or set it to at least {tenant.floor}."
            )
    if tenant.traffic is not None and not tenant.eager:
        need = tenant.traffic.blocks(tenant.attention)
        if tenant.traffic.tokens(tenant.attention) > tenant.attention.max_seq_len:
            raise ConfigError(
                f"deployment model {tenant.name}: its traffic's sequences are {tenant.traffic.tokens(tenant.attention)} "
                f"tokens (prompt + output), longer than its max_seq_len of {tenant.attention.max_seq_len}; raise "
                "max_seq_len or lower prompt_tokens/output_tokens."
            )
        if tenant.traffic.sequences() > tenant.attention.batch_size:
            raise ConfigError(
                f"deployment model {tenant.name}: its traffic needs {tenant.traffic.describe(tenant.attention)}, "
                f"more sequences than its batch_size of {tenant.attention.batch_size} can serve at once; raise "
                "batch_size or lower the traffic."
            )
        if need > tenant.full:
            raise ConfigError(
                f"deployment model {tenant.name}: its traffic needs {need} blocks "
                f"({tenant.traffic.describe(tenant.attention)}), {need - tenant.full} more than its full pool of "
                f"{tenant.full} (max_seq_len // kvcache_block_size * batch_size); raise batch_size or max_seq_len, "
                "or lower the traffic."
            )
    if tenant.weight <= 0 or not math.isfinite(float(tenant.weight)):
        raise ConfigError(f"deployment model {tenant.name}: weight must be a positive number, got {tenant.weight}.")
    # Every model must be planned on the target's own (node, chiplet) grid: the estimator would resolve
    # a report of another shape over that report's chiplets (as optimum-rbln 0.12.0 does), and the
    # per-chiplet sums of several models would no longer line up.
    buckets = tenant.report.chiplets()
    shape = (max((n for n, _ in buckets), default=-1) + 1, max((c for _, c in buckets), default=-1) + 1)
    if buckets and shape != (target.num_devices, target.num_chiplets):
        raise ConfigError(
            f"deployment model {tenant.name} on {target.name}: its report covers {shape[0]} device(s) of "
            f"{shape[1]} chiplet(s), but the target is {target.num_devices} x {target.npu.name} with "
            f"{target.num_chiplets} chiplet(s) each; plan it from a report compiled for this target."
        )
    request = Request.for_attention(
        target.npu.name, target.num_devices, tenant.attention, current_blocks=tenant.report.current_blocks
    )
    result = estimate(request, tenant.report)
    if result.breakdown is None:  # the request or the report was rejected outright
        raise ConfigError(f"deployment model {tenant.name} on {target.name}: {result.error}")
