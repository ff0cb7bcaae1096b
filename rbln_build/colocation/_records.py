"""The manifest's ``deployments`` section: each deployment built in this run, from its *built* cells.

A one-card deployment's record holds its models (planned and built counts, budgets, ports), the
per-chiplet totals of the built reports at the built counts, plus its reservations and margin, and
whether they fit. A deployment with a ``server`` key gets one such record per card that holds models
(``cards``, each with its card and devices), the server's placement and proof (``server``), and every
model once (``models``, each with its ``card``), so what reads a one-card record by its models (a
release, the report) reads a server's too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..config import BuildSettings, Cell, Deployment
from ..deploy import OBJECTIVE, Demand, DeploymentPlan, mib
from ..estimator import AllocationReport
from ..store import CellResult, Store
from ._colocation import _deployment_cells, deployment_cells
from ._server_build import ServerBuild, clear_cache, server_cells

__all__ = ["DeploymentRecords"]


class DeploymentRecords:
    """The manifest's ``deployments`` section: for each deployment built in this run, its models,
    planned and built counts and budgets, and the per-chiplet totals from the *built* reports (the
    compile entries of its cells) at the *built* counts, plus the reservations. ``problems`` lists
    what is wrong (a cell that did not build, a count other than planned, totals that do not fit);
    ``lines`` one summary line per deployment."""

    def __init__(self, planned: list[tuple[BuildSettings, DeploymentPlan | ServerBuild, list[Cell]]]) -> None:
        self.planned = planned
        self.problems: list[str] = []
        self.lines: list[str] = []

    @classmethod
    def for_jobs(cls, jobs: list[BuildSettings]) -> DeploymentRecords:
        from ..backends import get_backend

        planned: list[tuple[BuildSettings, DeploymentPlan | ServerBuild, list[Cell]]] = []
        for job in jobs:
            if job.deployment is None:
                continue
            toolchain = get_backend(job.matrix.backend).toolchain()
            # the plan the cells were expanded from (memoized)
            found = server_cells(job, toolchain) if job.deployment.server else deployment_cells(job, toolchain)
            planned.append((job, found[0], found[1]))
        _deployment_cells.cache_clear()  # a later expansion in this process plans again
        clear_cache()
        return cls(planned)

    def __call__(self, store: Store, rows: list[tuple[Cell, CellResult | None]]) -> dict[str, Any]:
        results = {cell.cell_key: result for cell, result in rows}
        self.problems, self.lines = [], []
        records = {}
        for settings, plan, cells in self.planned:
            d = settings.deployment
            assert d is not None
            if isinstance(plan, ServerBuild):
                record = _server_record(d, plan, results, store)
                headroom = [h for card in record["cards"] for h in card["per_chiplet"]["headroom"]]
                counts = "; ".join(
                    f"card {card['card']}: "
                    + ", ".join(f"{n} {m['kvcache_num_blocks']} blocks" for n, m in card["models"].items())
                    for card in record["cards"]
                )
                what = f"{d.mode}, a server of {d.server.cards if d.server else 0} card(s)"
            else:
                record = _record(d, plan, cells, results, store)
                headroom = record["per_chiplet"]["headroom"]
                counts = ", ".join(f"{n} {m['kvcache_num_blocks']} blocks" for n, m in record["models"].items())
                what = plan.mode
            records[d.name] = record
            self.problems += [f"{d.name}: {p}" for p in record["problems"]]
            verdict = "fit" if record["fits"] else "DO NOT FIT"
            if record["problems"]:
                verdict += f", but {len(record['problems'])} problem(s) below"
            self.lines.append(
                f"deployment {d.name} ({what}): {counts}; per-chiplet totals from the built "
                f"reports {verdict} (least headroom {mib(min(min(r) for r in headroom))} MiB)"
            )
        return {"deployments": records}


def _head(d: Any, target: Any) -> dict[str, Any]:
    """What a server's record and each card's (or a one-card deployment's) begin with."""
    return {
        "device": d.device.name,
        "npu": target.npu.name,
        "num_devices": target.num_devices,
        "mode": d.mode,
        "objective": OBJECTIVE,
    }


def _server_record(
    d: Deployment, build: ServerBuild, results: dict[str, CellResult | None], store: Store
) -> dict[str, Any]:
    """Every card's record (``_record`` of its own deployment), the placement, and the models with their cards."""
    plan = build.plan
    target = plan.server.target
    cards, models, problems = [], {}, []
    for cb in build.cards:
        card = {"card": cb.card, **_record(cb.deployment, cb.plan, list(cb.cells), results, store)}
        cards.append(card)
        problems += [f"card {cb.card}: {p}" for p in card["problems"]]
        for name, m in card["models"].items():
            models[name] = {**m, "card": cb.card}
    assert d.server is not None
    return {
        **_head(d, target),
        "server": {
            "cards": d.server.cards,
            "placement": dict(plan.placement),
            "pins": dict(d.server.pins),
            "optimal": plan.proof.optimal,
            "proof": plan.proof.note,
        },
        "cards": cards,
        "models": {m.name: models[m.name] for m in d.models if m.name in models},
        "serve": {"device_ids": list(d.device_ids)},
        "fits": all(card["fits"] for card in cards),
        "status": "ok" if not problems else "failed",
        "problems": problems,
    }


def _record(
    d: Deployment, plan: DeploymentPlan, cells: list[Cell], results: dict[str, CellResult | None], store: Store
) -> dict[str, Any]:
    target, chosen = plan.target, plan.chosen
    grid = target.grid
    problems: list[str] = []
    models: dict[str, Any] = {}
    used = list(chosen.reserved)
    for dm, a, cell in zip(d.models, chosen.assignments, cells, strict=True):
        result = results.get(cell.cell_key)
        entry = store.lookup("compile", cell.compile_key) if cell.compile_key else None
        usage: tuple[int, ...] | None = None
        serve_budget: int | None = None  # a budget that makes optimum-rbln compile the built count
        if result is None or not result.ok or entry is None or result.kvcache_num_blocks is None:
            problems.append(f"cell {cell.id} did not build" + (f": {result.error}" if result and result.error else ""))
        else:
            built = replace(plan.tenant(dm.name), report=AllocationReport.from_json(entry.meta["report"]))
            demand = Demand(built, target)
            count = result.kvcache_num_blocks
            usage = demand.need(count)
            used = [u + x for u, x in zip(used, usage, strict=True)]
            serve_budget = result.budget_bytes if not cell.kvcache_num_blocks else demand.budget_for(count)
            if count != a.kvcache_num_blocks:
                problems.append(
                    f"{dm.name} resolved {count} blocks, not the planned {a.kvcache_num_blocks}: its compiled report "
                    f"differs from the one planned with ({plan.tenant(dm.name).source}); run the build again to plan "
                    "from the compiled reports"
                )
        models[dm.name] = {
            "cell": cell.id,
            "model": dm.model.name,
            "fixed": a.fixed,
            "weight": float(dm.weight),
            "min_blocks": dm.min_blocks,
            "port": dm.port,
            "planned_blocks": a.kvcache_num_blocks,
            "memory_budget": cell.memory_budget,
            "budget_bytes": None if result is None else result.budget_bytes,
            "kvcache_num_blocks": None if result is None else result.kvcache_num_blocks,
            "num_full_blocks": a.num_full_blocks,
            "usage": None if usage is None else [list(r) for r in grid(usage)],
            "serve_budget_bytes": serve_budget,
        }
    available = target.available_per_chiplet
    margin = chosen.held()
    headroom = [available - u - m for u, m in zip(used, margin, strict=True)]
    fits = all(h >= 0 for h in headroom)
    if not fits:
        held = " once the margin is held" if any(margin) else ""
        problems.append(f"the built reports' per-chiplet totals exceed the available DRAM{held}")
    return {
        **_head(d, target),
        "models": models,
        "reservations": [{"name": r.name, "bytes": r.nbytes, "chiplet": r.chiplet} for r in d.reservations],
        "per_chiplet": {
            "available": available,
            "reserved": [list(r) for r in grid(chosen.reserved)],
            "margin": [list(r) for r in grid(margin)],
            "total": [list(r) for r in grid(tuple(used))],
            "headroom": [list(r) for r in grid(tuple(headroom))],
        },
        "serve": {"device_ids": list(d.device_ids)},
        "fits": fits,  # the built reports at the built counts, plus the reservations and the margin, fit every chiplet
        "status": "ok" if not problems else "failed",
        "problems": problems,
    }
