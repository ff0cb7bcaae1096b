"""Helpers shared by the memory-model tests: specs, reports and estimates for a recipe on a target.

Inventories are computed once per test process into one temporary cache directory (a meta-device
build of an 8B model costs seconds of imports the first time, milliseconds afterwards).
"""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from rbln_build.estimator import Request, Resolution, estimate
from rbln_build.estimator._npu import resolve_npu
from rbln_build.estimator._report import AllocationReport
from rbln_build.memory import CompileSpec
from rbln_build.memory._inventory import Inventory, inventory_for_recipe
from rbln_build.memory._model import build_report
from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR, Recipe, load_recipe

MiB = 2**20
_CACHE = Path(tempfile.mkdtemp(prefix="rbln-build-test-inventory-"))


@cache
def inventory(name: str) -> Inventory:
    return inventory_for_recipe(load_recipe(name), cache_dir=_CACHE)


def spec(recipe: str | Recipe, npu: str, num_devices: int = 1, **build: Any) -> CompileSpec:
    r = load_recipe(recipe) if isinstance(recipe, str) else recipe
    return CompileSpec.for_recipe(r, resolve_npu(npu), num_devices, **build)


def report(
    recipe: str | Recipe, npu: str, num_devices: int = 1, live_sets: float | None = None, **build: Any
) -> AllocationReport:
    s = spec(recipe, npu, num_devices, **build)
    inv = inventory(s.recipe.name) if s.recipe.directory.parent == DEFAULT_RECIPES_DIR else None
    return build_report(s, inv, cache_dir=_CACHE, live_sets=live_sets)


def resolve(
    recipe: str,
    npu: str,
    num_devices: int = 1,
    memory_budget: object = None,
    live_sets: float | None = None,
    **build: Any,
) -> Resolution:
    s = spec(recipe, npu, num_devices, **build)
    rep = build_report(s, inventory(recipe), live_sets=live_sets)
    return estimate(Request.for_attention(s.npu.name, num_devices, s.attention, memory_budget=memory_budget), rep)
