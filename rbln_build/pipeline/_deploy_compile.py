"""A deployment built with a compiler whose reports the memory model only estimates (``rbln``):
compile its models first, so that one build plans from their real compiled reports.

``compile_for_planning`` compiles each model of each such deployment at its configured geometry,
once per compile key, into the build directory's Store, exactly as the build's own compile stage
would (``_stages.compile_once``: the compile key does not depend on the budget). The planner then
finds those entries (``colocation.Reports``: "cache (rbln, rbln)"), the cells are expanded from
that plan, and the build reuses the entries: it compiles nothing twice and finalizes the cells.
A compile that fails is recorded as the build records it; the plan then takes that model's report
from the memory model, and its cell reports the compile's failure.

The compiles are kept even when the plan then does not fit: they are a cache keyed by the model's
compile inputs, not results, and a change that keeps the models' geometry (a reservation, a weight,
a minimum) reuses them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from ..config import BuildSettings

__all__ = ["COMPILED_REPORTS", "compile_for_planning"]

COMPILED_REPORTS = ("rbln",)  # backends whose reports come from a compiler, not the memory model


def compile_for_planning(jobs: Sequence[BuildSettings], out: TextIO | None = None) -> int:
    """Compile the models of the jobs' deployments whose backend is in ``COMPILED_REPORTS``; returns
    how many compiles ran (progress lines go to ``out``, default stdout)."""
    from ..backends import get_backend
    from ..colocation import Tenants
    from ..execution import compile_done, compile_once
    from ..store import Store, compile_key
    from ._startup import scope_inventory_cache

    out = out or sys.stdout
    ran = 0
    for job in jobs:
        d = job.deployment
        backend = job.matrix.backend
        if d is None or backend not in COMPILED_REPORTS:
            continue
        scope_inventory_cache(job.build_dir)  # as the build does: inventories in its cache
        tenants = Tenants(job)
        store = Store(job.build_dir / "cache")
        toolchain = get_backend(backend).toolchain()
        for i, dm in enumerate(d.models):
            spec = tenants.spec(dm)
            key = compile_key(spec.key_fields(), backend, toolchain)
            if compile_done(store, key):
                continue
            target = tenants.target
            what = f"[plan {i + 1}/{len(d.models)}] {dm.name} for {target.npu.name} x{target.num_devices} ({backend})"
            print(f"{what}: compiling, to plan deployment {d.name} from its compiled report ...", file=out, flush=True)
            outcome = compile_once(store, key, spec, backend)
            ran += 1
            error = getattr(outcome, "error", None)
            print(f"{what}: " + (f"failed: {error}" if error else "compiled"), file=out, flush=True)
    return ran
