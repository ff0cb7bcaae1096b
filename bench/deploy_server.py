"""Time against number of models on a server: each model placed on one of its cards and planned.

    python bench/deploy_server.py [--models 4,8,12,16,24,32] [--cards 4] [--slack 0.05] [--repeat 3]
                                  [--set mixed|small-llms] [--time-limit 60]

The models of ``bench/deploy_solver.py`` (``--set``: reports from the NPU memory model, computed once
into a temporary cache, not timed), on a server of ``--cards`` Rebel100 cards (RBLN-CR03, 4 chiplets
each). The room is *tight*: every card gets the same room, one reservation per chiplet leaving what
the fullest card of a round-robin placement (model i on card i % cards) needs at its models' floors
plus ``--slack`` of the way to their full pools (so the floors can always be packed).

For each N both modes (budget and blocks) are planned by ``rbln_build.deploy.server.plan_server``
(CP-SAT, one worker, ``--time-limit`` seconds per plan). Prints the median of ``--repeat`` runs,
the CP-SAT solves made (feasibility steps of the max-min search, then the objective's stages), whether
both plans are proven optimal, the smallest share and how many cards hold models; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from deploy import TARGET  # noqa: E402
from deploy_solver import MIXED, SMALL_LLMS, models  # noqa: E402

from rbln_build.deploy import MODES, Problem, Reservation, Solver, Tenant  # noqa: E402
from rbln_build.deploy.server import Card, Server, ServerPlan, plan_server  # noqa: E402


def tight(tenants: list[Tenant], slack: Fraction, cards: int) -> Server:
    """Every card the same room: what the fullest card of a round-robin placement (model i on card
    i % cards) needs, per chiplet, at its models' floors plus ``slack`` of the way to their full pools."""
    problem = Problem(TARGET, tenants)
    C = TARGET.num_chiplets
    cap = [0] * C
    for k in range(cards):
        on = problem.demands[k::cards]
        floors = [sum(c) for c in zip([0] * C, *(d.need(d.tenant.lower_bound) for d in on), strict=True)]
        fulls = [sum(c) for c in zip([0] * C, *(d.need(d.tenant.full) for d in on), strict=True)]
        cap = [max(x, f + int((u - f) * slack)) for x, f, u in zip(cap, floors, fulls, strict=True)]
    card = Card(tuple(Reservation(f"rest{c}", TARGET.available_per_chiplet - x, c) for c, x in enumerate(cap)))
    return Server(TARGET, (card,) * cards)


def timed(server: Server, tenants: list[Tenant], time_limit: float) -> tuple[float, list[ServerPlan]]:
    started = time.perf_counter()
    plans = [plan_server(server, tenants, mode, solver=Solver(time_limit=time_limit)) for mode in MODES]
    return time.perf_counter() - started, plans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="4,8,12,16,24,32")
    parser.add_argument("--cards", type=int, default=4)
    parser.add_argument("--slack", type=Fraction, default=Fraction(1, 20))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--set", choices=("mixed", "small-llms"), default="mixed")
    parser.add_argument("--time-limit", type=float, default=60.0)
    args = parser.parse_args()
    cache: dict[tuple[str, int, int], Tenant] = {}
    warm = models(2, cache, MIXED if args.set == "mixed" else SMALL_LLMS)
    timed(tight(warm, args.slack, args.cards), warm, args.time_limit)  # OR-Tools imported, not timed
    print(
        f"models: {args.set}; {args.cards} x rebel100; room per card: a round-robin card's floors + "
        f"{float(args.slack):g} of the way to its full pools; CP-SAT time limit {args.time_limit:g} s per plan"
    )
    print(f"{'models':>6}  {'seconds':>8}  {'solves':>6}  {'proven':<6}  {'budget plan':<28}  blocks plan")
    for n in (int(x) for x in args.models.split(",")):
        tenants = models(n, cache, MIXED if args.set == "mixed" else SMALL_LLMS)
        server = tight(tenants, args.slack, args.cards)
        runs = [timed(server, tenants, args.time_limit) for _ in range(args.repeat)]
        plans = runs[0][1]

        def what(p: ServerPlan) -> str:
            if not p.feasible:
                return "infeasible"
            used = len({k for _, k in p.placement})
            assert p.objective is not None
            return f"min share {float(p.objective.min_share):.3f}, {used} card(s)"

        solves = sum(p.solves for p in plans)
        proven = "yes" if all(p.proof.optimal for p in plans if p.feasible) else "no"
        seconds = statistics.median(r[0] for r in runs)
        print(f"{n:>6}  {seconds:>8.3f}  {solves:>6}  {proven:<6}  {what(plans[0]):<28}  {what(plans[1])}", flush=True)


if __name__ == "__main__":
    main()
