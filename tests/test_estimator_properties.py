"""Properties of the estimator, checked against an independent brute-force oracle.

The oracle restates the specification and optimum-rbln 0.12.0's reduction directly over the report
(no code shared with the estimator): the buckets are every (node, chiplet) that a non-DramTensor
allocation or a KV tensor mentions, missing entries counting 0; the chiplet count is the largest
chiplet index + 1 (the family's for an empty report), and each chiplet gets
``dram // chiplets - reserve``. A count N fits when, on every bucket, non-KV bytes + the sum over KV
tensors of align_2MiB(size // current_blocks * N) (resizable) or align_2MiB(size) (fixed) <=
budget // chiplets. Reports are drawn full or sparse (graphs, keys and tensors that leave out
trailing nodes or chiplets; whole reports narrower than the family).
"""

import math
from collections import namedtuple

from hypothesis import given, settings
from hypothesis import strategies as st

from rbln_build.estimator import Request, estimate, min_budget_for_blocks
from rbln_build.estimator._npu import resolve_npu
from rbln_build.estimator._report import AllocationReport, KVTensor

MiB, GiB = 2**20, 2**30
TWO_MIB = 2 * MiB
SETTINGS = settings(max_examples=80, deadline=None)
Device = namedtuple("Device", "num_chiplets available_bytes")


def oracle_need(report, n):
    """{(node, chiplet): bytes needed at n blocks}, written from the spec without the estimator."""
    need = {}
    for graph in report.alloc.values():
        for key, grid in graph.items():
            if key == "DramTensor":
                continue
            for i, row in enumerate(grid):
                for j, b in enumerate(row):
                    need[(i, j)] = need.get((i, j), 0) + b
    for t in report.kv_tensors.values():
        for i, row in enumerate(t.sizes):
            for j, size in enumerate(row):
                scaled = size // report.current_blocks * n if t.can_resize else size
                need[(i, j)] = need.get((i, j), 0) + math.ceil(scaled / TWO_MIB) * TWO_MIB
    return need


def oracle_device(report, npu):
    """(chiplets, available bytes per device) as 0.12.0 derives them from the report."""
    cells = [
        j
        for graph in report.alloc.values()
        for key, grid in graph.items()
        if key != "DramTensor"
        for row in grid
        for j in range(len(row))
    ]
    cells += [j for t in report.kv_tensors.values() for row in t.sizes for j in range(len(row))]
    chiplets = max(cells) + 1 if cells else npu.num_chiplets
    return Device(chiplets, (npu.dram_bytes // chiplets - npu.reserved_per_chiplet) * chiplets)


def oracle_fits(report, n, budget, chiplets):
    return all(v <= budget // chiplets for v in oracle_need(report, n).values())


def oracle_max(report, budget, chiplets, full):
    """Linear scan: the largest n in [0, full] with every count up to n fitting (no monotonicity assumed)."""
    best = 0
    for n in range(1, full + 1):
        if not oracle_fits(report, n, budget, chiplets):
            break
        best = n
    return best


def trimmed(draw, grid, sparse):
    """``grid`` as is, or (sparse) without some trailing nodes and each row without trailing chiplets."""
    if not sparse:
        return tuple(tuple(row) for row in grid)
    rows = grid[: draw(st.integers(0, len(grid)))]
    return tuple(tuple(row[: draw(st.integers(0, len(row)))]) for row in rows)


@st.composite
def cells(draw, max_full=64):
    """A flash-attention request on ATOM-Max or Rebel100 and a report for it, full or sparse.

    Returns (request, report, device): device holds the oracle's chiplet count and available bytes.
    """
    family = draw(st.sampled_from(["RBLN-CA25", "RBLN-CR03"]))
    npu = resolve_npu(family)
    nodes = draw(st.integers(1, 2))
    # full; sparse (graphs, keys, tensors leave trailing nodes or chiplets out); or narrow (the whole
    # report covers fewer chiplets than the family has, as a compiler that reports one chiplet would)
    shape = draw(st.sampled_from(["full", "full", "sparse", "narrow"]))
    sparse = shape != "full"
    c = npu.num_chiplets
    if shape == "narrow" and c > 1:
        c = draw(st.integers(1, c - 1))
    partition = 8_192
    per_seq = draw(st.integers(2, 6))
    batch = draw(st.integers(1, max(1, max_full // per_seq)))
    current = draw(st.sampled_from([1, 1, 2, 7, 40]))
    per_chiplet_avail = npu.available_bytes // npu.num_chiplets
    alloc = {}
    for graph, keys in (("prefill", ("w", "ws")), ("decode", ("ws",))):
        alloc[graph] = {
            key: trimmed(
                draw, [[draw(st.integers(0, per_chiplet_avail // 4)) for _ in range(c)] for _ in range(nodes)], sparse
            )
            for key in keys
        }
    # DramTensor is not charged, and its shape does not count either
    alloc["decode"]["DramTensor"] = ((GiB,) * npu.num_chiplets,) * nodes
    kv = {}
    for t in range(draw(st.integers(0, 4))):
        resizable = draw(st.booleans())
        # per-block sizes around 2 MiB multiples, odd bytes included
        sizes = [
            [
                draw(st.integers(0, 64 * MiB)) * (current if resizable else 1) + draw(st.integers(0, current - 1))
                for _ in range(c)
            ]
            for _ in range(nodes)
        ]
        kv[f"t{t}"] = KVTensor(resizable, trimmed(draw, sizes, sparse))
    report = AllocationReport(alloc=alloc, kv_tensors=kv, current_blocks=current)
    request = Request(
        npu=family,
        max_seq_len=per_seq * partition,
        batch_size=batch,
        num_devices=nodes,
        kvcache_partition_len=partition,
        attn_impl="flash_attn",
        current_blocks=current,
    )
    return request, report, oracle_device(report, npu)


def draw_budget(data, report, device, full):
    """Uniform over the device, or within 2 MiB of what some count needs (where the answers change)."""
    if data.draw(st.integers(0, 3)) == 0:
        return data.draw(st.integers(1, device.available_bytes))
    n = data.draw(st.integers(1, full))
    near = max(oracle_need(report, n).values(), default=0) * device.num_chiplets
    return min(max(1, near + data.draw(st.integers(-TWO_MIB, TWO_MIB))), device.available_bytes)


def with_budget(request, budget):
    return Request(**{**request.__dict__, "memory_budget": budget})


@SETTINGS
@given(cells(), st.data())
def test_result_is_the_largest_count_that_fits_and_never_exceeds_the_full_pool(cell, data):
    request, report, device = cell
    budget = draw_budget(data, report, device, estimate(request, report).num_full_blocks)
    res = estimate(with_budget(request, budget), report)
    full, floor = res.num_full_blocks, res.num_min_blocks
    expected = oracle_max(report, budget, device.num_chiplets, full)
    assert res.breakdown.max_fitting_blocks == expected
    if expected >= floor:
        assert res.ok and res.kvcache_num_blocks == expected <= full
        assert oracle_fits(report, expected, budget, device.num_chiplets)
        if expected < full:
            assert not oracle_fits(report, expected + 1, budget, device.num_chiplets)
    else:
        assert res.error_kind == "insufficient_memory"
        assert f"only {expected} blocks can be allocated, but at least {floor} blocks" in res.error


@SETTINGS
@given(cells(), st.data())
def test_need_never_decreases_with_the_block_count(cell, data):
    # the lemma that makes the reference's binary search exact
    _, report, _ = cell
    n = data.draw(st.integers(0, 5000))
    lo, hi = oracle_need(report, n), oracle_need(report, n + 1)
    assert all(lo[k] <= hi[k] for k in lo)


@SETTINGS
@given(cells(), st.data())
def test_a_larger_budget_never_gives_fewer_blocks(cell, data):
    request, report, device = cell
    full = estimate(request, report).num_full_blocks
    a = draw_budget(data, report, device, full)
    b = data.draw(
        st.one_of(st.integers(a, device.available_bytes), st.integers(a, min(a + TWO_MIB, device.available_bytes)))
    )
    fa = estimate(with_budget(request, a), report).breakdown.max_fitting_blocks
    fb = estimate(with_budget(request, b), report).breakdown.max_fitting_blocks
    assert fa <= fb


@SETTINGS
@given(cells(), st.data())
def test_alignment_boundaries_byte_by_byte(cell, data):
    """At exactly the bytes N blocks need the estimator grants N; one byte less it does not."""
    request, report, device = cell
    c = device.num_chiplets
    full = estimate(request, report).num_full_blocks
    n = data.draw(st.integers(1, full))
    need = max(oracle_need(report, n).values(), default=0) * c
    assert min_budget_for_blocks(report, n, c) == max(1, need)
    if not 1 <= need <= device.available_bytes:
        return
    at = estimate(with_budget(request, need), report).breakdown.max_fitting_blocks
    assert at >= n
    if need > 1:
        below = estimate(with_budget(request, need - 1), report).breakdown.max_fitting_blocks
        assert below < n


@st.composite
def boundary_cells(draw):
    """KV per-block sizes chosen so N blocks land exactly on, one byte under or one byte over 2 MiB k."""
    n = draw(st.integers(1, 40))
    k = draw(st.integers(1, 50))
    delta = draw(st.sampled_from([-1, 0, 1]))
    per_block = max(1, (k * TWO_MIB + delta) // n) if delta != 0 else k * TWO_MIB // n
    non_kv = draw(st.integers(0, 4 * GiB))
    report = AllocationReport(
        alloc={"prefill": {"w": ((non_kv,),)}},
        kv_tensors={"k": KVTensor(True, ((per_block,),)), "v": KVTensor(True, ((per_block,),))},
    )
    request = Request(npu="RBLN-CA25", max_seq_len=40_960, batch_size=8, kvcache_partition_len=8_192)
    return request, report, min(n, 40)


@SETTINGS
@given(boundary_cells())
def test_boundary_sizes_fit_exactly_at_their_aligned_bytes(cell):
    request, report, n = cell
    per_block = report.kv_tensors["k"].sizes[0][0]
    non_kv = report.alloc["prefill"]["w"][0][0]
    aligned = math.ceil(per_block * n / TWO_MIB) * TWO_MIB
    budget = non_kv + 2 * aligned
    assert estimate(with_budget(request, budget), report).breakdown.max_fitting_blocks >= n
    assert estimate(with_budget(request, budget - 1), report).breakdown.max_fitting_blocks < n


@SETTINGS
@given(cells())
def test_smallest_budgets_for_floor_and_full_pool_are_exact(cell):
    request, report, device = cell
    res = estimate(request, report)
    for answer, blocks in (
        (res.breakdown.budget_for_floor, res.num_min_blocks),
        (res.breakdown.budget_for_full_pool, res.num_full_blocks),
    ):
        if answer.bytes is None:
            assert answer.required_bytes > device.available_bytes and answer.reason
            continue
        at = estimate(with_budget(request, answer.bytes), report)
        assert at.ok and at.kvcache_num_blocks >= blocks
        if answer.bytes > 1:
            below = estimate(with_budget(request, answer.bytes - 1), report)
            assert below.breakdown.max_fitting_blocks < blocks
        via_fraction = estimate(with_budget(request, answer.fraction), report)
        assert via_fraction.ok and via_fraction.kvcache_num_blocks >= blocks


@SETTINGS
@given(cells(), st.integers(2, 50), st.data())
def test_reestimation_at_current_blocks_matches_the_baseline(cell, current, data):
    request, report, device = cell
    base = AllocationReport(
        alloc=report.alloc,
        kv_tensors={
            k: KVTensor(
                t.can_resize,
                tuple(tuple(s // report.current_blocks if t.can_resize else s for s in row) for row in t.sizes),
            )
            for k, t in report.kv_tensors.items()
        },
    )
    scaled = AllocationReport(
        alloc=report.alloc,
        kv_tensors={
            k: KVTensor(t.can_resize, tuple(tuple(s * current if t.can_resize else s for s in row) for row in t.sizes))
            for k, t in base.kv_tensors.items()
        },
        current_blocks=current,
    )
    budget = data.draw(st.integers(1, device.available_bytes))
    one = estimate(Request(**{**request.__dict__, "current_blocks": 1, "memory_budget": budget}), base)
    many = estimate(Request(**{**request.__dict__, "current_blocks": current, "memory_budget": budget}), scaled)
    assert one.to_json() == many.to_json()


ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 70_000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["RBLN-CA25", "rebel100", "flash_attn", "eager", "30%", "10GB", "1TB"]),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            name: ANY
            for name in (
                "npu",
                "max_seq_len",
                "batch_size",
                "num_devices",
                "attn_impl",
                "kvcache_partition_len",
                "kvcache_block_size",
                "prefill_chunk_size",
                "kvcache_num_blocks",
                "memory_budget",
                "current_blocks",
            )
        },
    )
)
def test_estimate_never_raises_for_bad_request_content(fields):
    request = Request(**{"npu": "RBLN-CA25", "max_seq_len": 16_384, **fields})
    report = AllocationReport(alloc={"prefill": {"w": ((GiB,),)}}, kv_tensors={"k": KVTensor(True, ((MiB,),))})
    res = estimate(request, report)
    assert res.ok == (res.error is None)
    if not res.ok:
        assert res.error_kind and res.kvcache_num_blocks is None
    else:
        assert res.kvcache_num_blocks >= 1
