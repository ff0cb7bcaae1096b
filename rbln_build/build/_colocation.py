"""A configured deployment, planned from real reports, and the plan as matrix cells.

Each model's report comes from the build directory's compile cache when it holds the compile of that
model's compile key (for the configured backend), else from the NPU memory model, which gives the
report the ``torch`` backend and plans record. Reading the cache and the memory model's cached
inventories imports neither torch nor transformers.

``deployment_cells`` turns the plan into cells through the ordinary matrix expansion: one sub-matrix
per model, with its planned budget (mode ``budget``) or its planned explicit count (mode ``blocks``),
so a deployment's cells have the same keys, tasks, artifacts and manifest entries as any other.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..backends._base import CompileSpec
from ..deploy import BLOCKS, DeploymentPlan, Target, Tenant, plan_deployment, render_plan
from ..errors import BackendUnavailable, ConfigError, EstimateError
from ..estimator import AllocationReport, resolve_npu
from ..memory import Recipe, load_recipe
from ._config import BuildSettings, Matrix, Model, SubMatrix
from ._deployment import Deployment, DeploymentModel
from ._keys import compile_key
from ._matrix import BUILD_OPTIONS, Cell, expand
from ._store import Store

__all__ = ["Reports", "plan_for", "deployment_cells", "target_of"]


class Reports:
    """Where a model's AllocationReport comes from: the compile cache, else the memory model."""

    def __init__(self, settings: BuildSettings) -> None:
        self.backend = settings.matrix.backend
        self.store = Store(settings.build_dir / "cache", warn=lambda message: None)
        self.inventory_dir: Path | None = None
        if not os.environ.get("RBLN_BUILD_CACHE"):  # as a build does: inventories live in the build dir
            self.inventory_dir = settings.build_dir / "cache" / "inventory"
        self._toolchain: dict[str, str] | None | bool = False

    def toolchain(self) -> dict[str, str] | None:
        if self._toolchain is False:
            from ..backends import get_backend

            try:
                self._toolchain = get_backend(self.backend).toolchain()
            except BackendUnavailable:
                self._toolchain = None  # nothing of this backend can be in the cache
        return self._toolchain  # type: ignore[return-value]

    def report(self, spec: CompileSpec) -> tuple[AllocationReport, str]:
        toolchain = self.toolchain()
        if toolchain is not None and self.store.root.is_dir():
            entry = self.store.lookup("compile", compile_key(spec.key_fields(), self.backend, toolchain))
            if entry is not None:
                report = AllocationReport.from_json(entry.meta["report"])
                return report, f"compiled {entry.meta.get('produced', '?')} ({self.backend}, cache)"
        from ..memory import build_report

        return build_report(spec, cache_dir=self.inventory_dir), "memory model"


def target_of(deployment: Deployment) -> Target:
    try:
        npu = resolve_npu(deployment.device.npu)
    except EstimateError as exc:
        raise ConfigError(f"deployment.device ({deployment.device.name}): npu: {exc}") from None
    return Target(deployment.device.name, npu, deployment.device.num_devices)


def _options(dm: DeploymentModel, recipe: Recipe) -> dict[str, Any]:
    """Build options as the matrix resolves them: the recipe's, the model config's, the deployment's."""
    out = {k: recipe.build.get(k) for k in BUILD_OPTIONS}
    out.update({k: v for k, v in dm.model.options if v is not None})
    if dm.batch_size is not None:
        out["batch_size"] = dm.batch_size
    if dm.max_seq_len is not None:
        out["max_seq_len"] = dm.max_seq_len
    return {k: v for k, v in out.items() if v is not None}


class _Tenants:
    def __init__(self, settings: BuildSettings) -> None:
        assert settings.deployment is not None
        self.deployment: Deployment = settings.deployment
        self.target = target_of(self.deployment)
        self.reports = Reports(settings)
        self.recipes = {m.name: load_recipe(m.model.recipe, settings.recipes_dir) for m in self.deployment.models}

    def make(self, dm: DeploymentModel, options: dict[str, Any]) -> Tenant:
        where = f"deployment.models[{self.deployment.models.index(dm)}] ({dm.name})"
        try:
            spec = CompileSpec.for_recipe(self.recipes[dm.name], self.target.npu, self.target.num_devices, **options)
        except EstimateError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        report, source = self.reports.report(spec)
        return Tenant(
            name=dm.name, report=report, attention=spec.attention, weight=dm.weight, min_blocks=dm.min_blocks,
            memory_budget=dm.memory_budget, source=source, options=tuple(sorted(options.items())),
        )

    def reshape(self, tenant: Tenant, change: dict[str, int]) -> Tenant:
        changed = self.make(self.deployment.model(tenant.name), {**dict(tenant.options), **change})
        return replace(changed, min_blocks=tenant.min_blocks, memory_budget=tenant.memory_budget)


def plan_for(settings: BuildSettings) -> DeploymentPlan:
    """Plan the configured deployment (both modes; suggestions when its mode has no plan)."""
    tenants = _Tenants(settings)
    d = tenants.deployment
    built = [tenants.make(m, _options(m, tenants.recipes[m.name])) for m in d.models]
    return plan_deployment(tenants.target, built, d.reservations, d.mode, reshape=tenants.reshape)


def deployment_cells(settings: BuildSettings, toolchain: dict[str, str]) -> tuple[DeploymentPlan, list[Cell]]:
    """The plan and its cells, in the deployment's order. An infeasible plan is a ConfigError whose
    message is the plan (the conflict and the verified changes)."""
    d = settings.deployment
    assert d is not None
    plan = plan_for(settings)
    if not plan.feasible:
        raise ConfigError(
            f"deployment {d.name}: the {d.mode} plan does not fit, so nothing was built.\n"
            + render_plan(plan, d.name).rstrip()
        )
    parts = []
    for i, (dm, a) in enumerate(zip(d.models, plan.chosen.assignments)):
        explicit = d.mode == BLOCKS and not a.fixed
        parts.append(
            SubMatrix(
                where=f"deployment.models[{i}]",
                models=(Model(name=dm.name, recipe=dm.model.recipe, options=dm.model.options),),
                devices=(d.device,),
                budgets=(None,) if explicit else (a.memory_budget,),
                batch_sizes=None if dm.batch_size is None else (dm.batch_size,),
                max_seq_lens=None if dm.max_seq_len is None else (dm.max_seq_len,),
                kvcache_num_blocks=(a.kvcache_num_blocks,) if explicit else (0,),
                attn_impl=None,
                kvcache_partition_len=None,
            )
        )
    matrix = Matrix(
        models=(), devices=(), budgets=(None,), batch_sizes=None, max_seq_lens=None, kvcache_num_blocks=(0,),
        attn_impl=None, kvcache_partition_len=None, backend=settings.matrix.backend, expect_failure=(),
        include=tuple(parts),
    )
    cells = expand(replace(settings, matrix=matrix), toolchain)
    if len(cells) != len(d.models):  # one sub-matrix of one cell per model; ids cannot collide
        raise ConfigError(f"deployment {d.name}: expected {len(d.models)} cells, got {[c.id for c in cells]}.")
    return plan, cells
