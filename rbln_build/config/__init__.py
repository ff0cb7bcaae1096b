"""The configuration: what to build, as Hydra composes it and as the pipeline reads it.

_schema      the typed Hydra schemas (OmegaConf structured configs)
_settings    the frozen settings a composed config becomes (BuildSettings, Model, Device, ...)
_config      composition: registering the schemas, converting a config to settings
_checks      names and bounds checked at composition
_scale       the jobs / executor / cache keys
_project     a user's project: its conf/ and recipes/ layered over the shipped ones
_deployment  conf/deployment/*.yaml: models sharing one target
_matrix      settings -> cells (stable order, stable ids, their keys)
_shard       shard=I/N: which compile keys one CI run builds
_groups      conf/<group>/<option>.yaml read and checked
_layout      what a build dir holds: nothing in it followed out; cache.dir, a cache shared by build dirs
"""

from __future__ import annotations

from ._config import compose_settings, register_configs, settings_from_config
from ._deployment import Deployment, DeploymentModel
from ._groups import device_from_node, list_group_options, load_group_option, model_from_node
from ._layout import CACHE_DIR, check_contained, link_shared_cache, owner_tag
from ._matrix import BUILD_OPTIONS, Cell, expand
from ._project import MARKER, PROJECT_ENV, Project, find_project, split_project_arg
from ._scale import Scale
from ._schema import closest_names, schema_field_names
from ._settings import BuildSettings, Device, Matrix, Model, SubMatrix
from ._shard import assign as assign_shards
from ._shard import select as select_shard

__all__ = [
    "closest_names",
    "schema_field_names",
    "BUILD_OPTIONS",
    "BuildSettings",
    "CACHE_DIR",
    "Cell",
    "Deployment",
    "DeploymentModel",
    "Device",
    "MARKER",
    "Matrix",
    "Model",
    "PROJECT_ENV",
    "Project",
    "Scale",
    "SubMatrix",
    "check_contained",
    "compose_settings",
    "device_from_node",
    "expand",
    "find_project",
    "link_shared_cache",
    "list_group_options",
    "load_group_option",
    "model_from_node",
    "owner_tag",
    "register_configs",
    "select_shard",
    "assign_shards",
    "settings_from_config",
    "split_project_arg",
]
