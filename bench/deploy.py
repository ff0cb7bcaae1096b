"""Time of the co-location planner (both plans, exact), in process, once the reports are loaded.

    python bench/deploy.py [--repeat N]

Cases, all on one Rebel100 (RBLN-CR03, 4 chiplets), reports from the NPU memory model (the recipes'
inventories are computed once into a temporary cache, not timed):

* the shipped deployment: Qwen3-8B (batch 8, 40960) + Llama-3.2-1B + 20 GiB on chiplet 0;
* four models (Qwen3-8B, Llama-3.2-1B, Qwen3-0.6B, Gemma-3-1B with its sliding-window layers) with
  40 GiB spread evenly, so that every model is cut below its full pool;
* the same four with 100 GiB spread evenly: an infeasible deployment, with its verified changes
  (each a re-plan; batch and length changes rebuild a report, which is timed here).

Prints the median time of ``plan_deployment`` and the search nodes of each plan; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rbln_build.deploy import Reservation, Target, Tenant, plan_deployment  # noqa: E402
from rbln_build.estimator import GiB, resolve_npu  # noqa: E402
from rbln_build.memory import CompileSpec, build_report, load_recipe  # noqa: E402

NPU = resolve_npu("RBLN-CR03")
TARGET = Target("rebel100", NPU)
CACHE = Path(tempfile.mkdtemp(prefix="rbln-build-bench-deploy-"))


def tenant(name: str, **options: int) -> Tenant:
    spec = CompileSpec.for_recipe(load_recipe(name), NPU, 1, **options)
    return Tenant(name, build_report(spec, cache_dir=CACHE), spec.attention, options=tuple(sorted(options.items())))


def reshape(t: Tenant, change: dict[str, int]) -> Tenant:
    return replace(tenant(t.name, **{**dict(t.options), **change}), weight=t.weight)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    pair = [tenant("qwen3_8b", batch_size=8, max_seq_len=40960), tenant("llama3_2_1b")]
    four = [*pair, tenant("qwen3_0_6b"), tenant("gemma3_1b")]
    cases = [
        ("shipped pair, 20 GiB on chiplet 0", pair, [Reservation("vision_encoder", 20 * GiB, 0)]),
        ("four models, 40 GiB spread", four, [Reservation("other", 40 * GiB)]),
        ("four models, 100 GiB spread (infeasible)", four, [Reservation("other", 100 * GiB)]),
    ]
    print(f"{'case':44} {'median ms':>10} {'budget nodes':>13} {'blocks nodes':>13}  result")
    for label, tenants, reservations in cases:
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            plan = plan_deployment(TARGET, tenants, reservations, reshape=reshape)
            times.append(time.perf_counter() - started)
        if plan.feasible:
            result = ", ".join(f"{a.name} {a.kvcache_num_blocks}/{a.num_full_blocks}" for a in plan.budget.assignments)
        else:
            result = f"{len(plan.suggestions)} verified change(s), first: {plan.suggestions[0].describe()}"
        print(
            f"{label:44} {statistics.median(times) * 1000:>10.1f} {plan.budget.nodes:>13} {plan.blocks.nodes:>13}  {result}"
        )


if __name__ == "__main__":
    main()
