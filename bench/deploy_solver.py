"""Time against number of models: the hand-written search and the CP-SAT solver, side by side.

    python bench/deploy_solver.py [--models 2,4,8,12,16,24,32] [--slack 0.05] [--nodes 200000] [--repeat 3]
                                  [--set mixed|small-llms]

Deployments of N small models on one Rebel100 (RBLN-CR03, 4 chiplets), each a model of its own
name, cycling through six geometries of the shipped recipes (reports from the NPU memory model,
computed once into a temporary cache, not timed):

* ``--set mixed`` (the default): Qwen3-0.6B at batch 4 and 2 and Llama-3.2-1B at batch 4, all at
  16,384 tokens; Gemma-3-1B at batch 4 and 32,768 tokens; the tiny Llama and Qwen3 at batch 2
  (32 of them fit);
* ``--set small-llms``: Qwen3-0.6B and Llama-3.2-1B at batch 8 and 4, Gemma-3-1B at batch 4 and 2,
  at their recipes' lengths (up to about 20 fit).

The room is *tight*: one reservation per chiplet leaves the models' floors plus ``--slack`` of the
way from their floors to their full pools, on every chiplet.

For each N, both modes (budget and blocks) are solved by each method from the same ``Problem``
(``Problem.solve``: step 1, the max-min binary search, then steps 2-4): the search with a node limit
of ``--nodes`` (past it the time to give up is printed, ``>`` its nodes), CP-SAT with one worker and
its default time limit. Prints the median of ``--repeat`` runs, and whether the plans are equal
where both finished; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from deploy import TARGET, tenant  # noqa: E402

from rbln_build.deploy import CP_SAT, MODES, SEARCH, Problem, Reservation, Solver, Tenant  # noqa: E402
from rbln_build.errors import ConfigError  # noqa: E402

SMALL_LLMS = [  # --set small-llms: larger models, fewer fit; (recipe, batch_size, max_seq_len)
    ("qwen3_0_6b", 8, 40960),
    ("llama3_2_1b", 8, 32768),
    ("gemma3_1b", 4, 32768),
    ("qwen3_0_6b", 4, 40960),
    ("llama3_2_1b", 4, 32768),
    ("gemma3_1b", 2, 32768),
]
MIXED = [  # --set mixed (the default)
    ("qwen3_0_6b", 4, 16384),
    ("llama3_2_1b", 4, 16384),
    ("gemma3_1b", 4, 32768),
    ("tiny_llama", 2, 4096),
    ("tiny_qwen3", 2, 8192),
    ("qwen3_0_6b", 2, 16384),
]


def models(n: int, cache: dict[tuple[str, int, int], Tenant], geometries: list[tuple[str, int, int]]) -> list[Tenant]:
    out = []
    for i in range(n):
        key = geometries[i % len(geometries)]
        if key not in cache:
            cache[key] = tenant(key[0], batch_size=key[1], max_seq_len=key[2])
        out.append(replace(cache[key], name=f"m{i}_{key[0]}_b{key[1]}"))
    return out


def tight(tenants: list[Tenant], slack: Fraction) -> list[Reservation]:
    problem = Problem(TARGET, tenants)
    C = TARGET.num_chiplets
    floors = [0] * C
    fulls = [0] * C
    for d in problem.demands:
        floors = [a + b for a, b in zip(floors, d.need(d.tenant.lower_bound), strict=True)]
        fulls = [a + b for a, b in zip(fulls, d.need(d.tenant.full), strict=True)]
    cap = [f + int((u - f) * slack) for f, u in zip(floors, fulls, strict=True)]
    return [Reservation(f"rest{c}", TARGET.available_per_chiplet - x, c) for c, x in enumerate(cap)]


def timed(
    tenants: list[Tenant], reservations: list[Reservation], solver: Solver, nodes: int
) -> tuple[float, str, object]:
    started = time.perf_counter()
    try:
        problem = Problem(TARGET, tenants, reservations, solver=solver)
        plans = [problem.solve(mode, limit=nodes) for mode in MODES]
    except ConfigError:
        return time.perf_counter() - started, f"stopped: > {nodes:,} nodes", None
    seconds = time.perf_counter() - started
    if solver.method == SEARCH:
        what = f"{sum(p.nodes for p in plans):,} nodes"
    else:
        what = "proven optimal" if all(p.proof.optimal for p in plans) else "; ".join(p.proof.note for p in plans)
    key = [tuple(a.kvcache_num_blocks for a in p.assignments) for p in plans]
    return seconds, what, key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="2,4,8,12,16,24,32")
    parser.add_argument("--slack", type=Fraction, default=Fraction(1, 20))
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--set", choices=("mixed", "small-llms"), default="mixed")
    args = parser.parse_args()
    cache: dict[tuple[str, int, int], Tenant] = {}
    print(
        f"models: {args.set}; room: floors + {float(args.slack):g} of the way to the full pools; search node limit {args.nodes:,}"
    )
    print(f"{'models':>6}  {'search s':>9}  {'search':<28} {'cp-sat s':>9}  {'cp-sat':<16} same plans")
    for n in (int(x) for x in args.models.split(",")):
        tenants = models(n, cache, MIXED if args.set == "mixed" else SMALL_LLMS)
        reservations = tight(tenants, args.slack)
        rows = []
        for solver in (Solver(SEARCH), Solver(CP_SAT)):
            runs = [timed(tenants, reservations, solver, args.nodes) for _ in range(args.repeat)]
            rows.append((statistics.median(r[0] for r in runs), runs[0][1], runs[0][2]))
        (s_time, s_what, s_key), (c_time, c_what, c_key) = rows
        same = "-" if s_key is None else ("yes" if s_key == c_key else "NO")
        print(f"{n:>6}  {s_time:>9.3f}  {s_what:<28} {c_time:>9.3f}  {c_what:<16} {same}", flush=True)


if __name__ == "__main__":
    main()
