"""What a model occupies: recipes, the exact parameter inventory, the NPU memory model, explain.

    _recipes     recipes/<name>/: the published HF config.json plus our recipe.yaml
    _spec        CompileSpec: what a backend compiles (recipe, NPU target, devices, attention)
    _inventory   every parameter's shape and dtype, built on the meta device (cached; torch and
                 transformers are imported only when an inventory must be computed)
    _model       the documented NPU memory model: an AllocationReport per chiplet from an inventory
    explain      ``rbln-build explain``: which budget does a model need on a target?

Importing this package imports neither torch nor transformers.
"""

from __future__ import annotations

from ._inventory import Inventory, TensorEntry, cached_inventory, inventory_for_recipe
from ._model import ACTIVATION_LIVE_SETS, ModelFacts, build_report, layer_placement, model_facts
from ._recipes import DEFAULT_RECIPES_DIR, Geometry, Recipe, list_recipes, load_recipe
from ._spec import CompileSpec

__all__ = [
    "ACTIVATION_LIVE_SETS",
    "CompileSpec",
    "DEFAULT_RECIPES_DIR",
    "Geometry",
    "Inventory",
    "ModelFacts",
    "Recipe",
    "TensorEntry",
    "build_report",
    "cached_inventory",
    "inventory_for_recipe",
    "layer_placement",
    "list_recipes",
    "load_recipe",
    "model_facts",
]
