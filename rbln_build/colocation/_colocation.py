"""A configured deployment, planned from real reports, and the plan as matrix cells.

Each model's report comes from the compile cache, else the NPU memory model (``_reports``).

``deployment_cells`` turns the plan into cells through the ordinary matrix expansion: one sub-matrix
per model, with its planned budget (mode ``budget``) or its planned explicit count (mode ``blocks``),
so a deployment's cells have the same keys, tasks, artifacts and manifest entries as any other.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from ..config import (
    BUILD_OPTIONS,
    BuildSettings,
    Cell,
    Deployment,
    DeploymentModel,
    Matrix,
    Model,
    SubMatrix,
    device_from_node,
    expand,
    list_group_options,
    load_group_option,
)
from ..deploy import BLOCKS, Assignment, DeploymentPlan, Target, Tenant, plan_deployment, render_plan
from ..errors import ConfigError, EstimateError, UserError
from ..estimator import resolve_npu
from ..memory import CompileSpec, Recipe, load_recipe
from ._deploy_overrides import overrides_for
from ._reports import Reports

__all__ = ["Reports", "plan_for", "deployment_cells", "cells_of", "target_of"]


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


class _Plan(Protocol):
    @property
    def feasible(self) -> bool: ...


P = TypeVar("P", bound=_Plan)


class Tenants:
    """The deployment's models as planner tenants, on its target or (for suggestions) another one."""

    def __init__(self, settings: BuildSettings, stage: bool = False) -> None:
        assert settings.deployment is not None
        self.deployment: Deployment = settings.deployment
        self.target = target_of(self.deployment)
        self.reports = Reports(settings, stage)
        self.recipes = {
            m.name: load_recipe(m.model.recipe, settings.recipe_dirs or settings.recipes_dir)
            for m in self.deployment.models
        }

    def spec(
        self, dm: DeploymentModel, options: dict[str, Any] | None = None, target: Target | None = None
    ) -> CompileSpec:
        """What the model compiles as, with its configured options (or ``options``), on the target."""
        where = f"deployment.models[{self.deployment.models.index(dm)}] ({dm.name})"
        target = target or self.target
        options = _options(dm, self.recipes[dm.name]) if options is None else options
        try:
            return CompileSpec.for_recipe(self.recipes[dm.name], target.npu, target.num_devices, **options)
        except EstimateError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    def settle(self, plan_with: Callable[[list[Tenant]], P]) -> P:
        """``plan_with`` the deployment's models as configured; the reports read on the way are kept
        (written to the build directory when staging) only when the plan fits."""
        try:
            plan = plan_with([self.make(m, _options(m, self.recipes[m.name])) for m in self.deployment.models])
        except BaseException:
            self.reports.discard()
            raise
        if plan.feasible:
            self.reports.commit()
        else:
            self.reports.discard()
        return plan

    def make(self, dm: DeploymentModel, options: dict[str, Any], target: Target | None = None) -> Tenant:
        spec = self.spec(dm, options, target)
        report, source = self.reports.report(spec)
        return Tenant(
            name=dm.name,
            report=report,
            attention=spec.attention,
            weight=dm.weight,
            min_blocks=dm.min_blocks,
            memory_budget=dm.memory_budget,
            source=source,
            options=tuple(sorted(options.items())),
            traffic=dm.traffic,
        )

    def reshape(self, tenant: Tenant, change: dict[str, int]) -> Tenant:
        changed = self.make(self.deployment.model(tenant.name), {**dict(tenant.options), **change})
        return replace(changed, min_blocks=tenant.min_blocks, memory_budget=tenant.memory_budget)

    def retarget(self, tenant: Tenant, target: Target) -> Tenant:
        """The same model, options and constraints on another device target (its report there)."""
        dm = self.deployment.model(tenant.name)
        changed = self.make(dm, _options(dm, self.recipes[dm.name]), target)
        return replace(changed, min_blocks=tenant.min_blocks, memory_budget=tenant.memory_budget)


def shipped_targets() -> list[Target]:
    """Every shipped device target (conf/device/*.yaml), for the device suggestions."""
    out = []
    for name in list_group_options("device"):
        try:
            device = device_from_node(name, load_group_option("device", name, "conf/device"))
            out.append(Target(name, resolve_npu(device.npu), device.num_devices))
        except (UserError, EstimateError):  # a broken shipped file is not this deployment's problem
            continue
    return out


def plan_for(settings: BuildSettings, stage: bool = False) -> DeploymentPlan:
    """Plan the configured deployment (both modes; suggestions when its mode has no plan).
    ``stage``: write into the build directory only when the plan fits (a build's planning)."""
    tenants = Tenants(settings, stage)
    d = tenants.deployment
    return tenants.settle(
        lambda built: plan_deployment(
            tenants.target,
            built,
            d.reservations,
            d.mode,
            reshape=tenants.reshape,
            retarget=tenants.retarget,
            targets=shipped_targets(),
            margins=d.margins,
            solver=d.solver,
        )
    )


def deployment_cells(settings: BuildSettings, toolchain: dict[str, str]) -> tuple[DeploymentPlan, list[Cell]]:
    """The plan and its cells, in the deployment's order. An infeasible plan is a ConfigError whose
    message is the plan (the conflict and the verified changes). Memoized per settings and
    toolchain: expanding the cells and recording the deployment plan once."""
    return _deployment_cells(settings, tuple(sorted(toolchain.items())))


@functools.lru_cache(maxsize=16)
def _deployment_cells(
    settings: BuildSettings, toolchain_items: tuple[tuple[str, str], ...]
) -> tuple[DeploymentPlan, list[Cell]]:
    toolchain = dict(toolchain_items)
    d = settings.deployment
    assert d is not None
    plan = plan_for(settings, stage=True)
    if not plan.feasible:
        error = ConfigError(
            f"deployment {d.name}: the {d.mode} plan does not fit, so nothing was built. The plan below names "
            "every model that cannot fit and the changes that fit, each with the overrides that apply it "
            f"(`rbln-build plan deployment={d.name}` with the same overrides prints it too)."
        )
        error.detail = render_plan(plan, d.name, overrides=overrides_for(d))
        raise error
    return plan, cells_of(settings, d, plan.chosen.assignments, toolchain)


def cells_of(
    settings: BuildSettings, d: Deployment, assignments: Sequence[Assignment], toolchain: dict[str, str]
) -> list[Cell]:
    """The cells of ``d``'s models at their planned ``assignments`` (in ``d.models``' order), through the
    ordinary matrix expansion: one sub-matrix per model, at its budget or (mode blocks) its count."""
    parts = []
    for i, (dm, a) in enumerate(zip(d.models, assignments, strict=True)):
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
        models=(),
        devices=(),
        budgets=(None,),
        batch_sizes=None,
        max_seq_lens=None,
        kvcache_num_blocks=(0,),
        attn_impl=None,
        kvcache_partition_len=None,
        backend=settings.matrix.backend,
        expect_failure=(),
        include=tuple(parts),
    )
    cells = expand(replace(settings, matrix=matrix), toolchain)
    if len(cells) != len(d.models):  # one sub-matrix of one cell per model; ids cannot collide
        raise ConfigError(f"deployment {d.name}: expected {len(d.models)} cells, got {[c.id for c in cells]}.")
    return cells
