"""The composed config's conversion to frozen settings (schemas: ``_schema``; settings: ``_settings``).

This is the only module besides ``cli`` that touches OmegaConf. Hydra composes ``conf/`` against
these dataclasses (registered in the ConfigStore as ``rbln_build_schema`` and named by
``conf/config.yaml``'s defaults list), so a misspelt key or a wrong type fails at composition with
the key's path. ``settings_from_config`` then turns the composed DictConfig into a frozen
``BuildSettings`` once; nothing downstream sees OmegaConf.

Groups (``conf/<group>/<option>.yaml``)::

    matrix   what to build: lists of models, devices, budgets and build options (MatrixConf),
             plus ``include``: sub-matrices appended after the main product (MatrixIncludeConf)
    model    narrows the matrix to one model; conf/model/<name>.yaml points at a recipe (ModelConf)
    device   narrows the matrix to one device target (DeviceConf: npu, num_devices)

``budget`` is a plain value, not a group: ``budget=0.3`` narrows the budget axis to that value
(any form the estimator takes: null, 0.3, "50%", 1073741824, "10GB"; types are kept, 1 != 1.0).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..errors import ConfigError
from ..memory import DEFAULT_RECIPES_DIR
from ..quantization import gate_limit, parse_variants
from ._checks import (
    check_blocks,
    check_budgets,
    check_build_dir,
    check_count,
    check_name,
    check_names,
    check_partition,
    expected_failure_fields,
    same_budget,
)
from ._groups import CONF_DIR, _plain, device_from_node, list_group_options, load_group_option, model_from_node
from ._layout import check_cache_dir
from ._scale import scale_from_config
from ._schema import (
    AttnImpl,
    BuildConf,
    DeviceConf,
    ExpectedFailureConf,
    MatrixConf,
    MatrixIncludeConf,
    ModelConf,
    merge_structured,
    register_build_schema,
)
from ._settings import BuildSettings, Device, ExpectedFailure, Matrix, Model, SubMatrix

__all__ = [
    "AttnImpl",
    "DeviceConf",
    "ModelConf",
    "ExpectedFailureConf",
    "MatrixIncludeConf",
    "MatrixConf",
    "BuildConf",
    "Device",
    "Model",
    "ExpectedFailure",
    "SubMatrix",
    "Matrix",
    "BuildSettings",
    "CONF_DIR",
    "register_configs",
    "settings_from_config",
    "load_group_option",
    "list_group_options",
    "compose_settings",
]


def register_configs() -> None:
    """Register the build's and the deployments' schemas in Hydra's ConfigStore (idempotent)."""
    from ._deployment import register_deployment_schema

    register_build_schema()
    register_deployment_schema()


def _positive_ints(where: str, values: Any) -> tuple[int, ...] | None:
    if values is None:
        return None
    out = tuple(_plain(values))
    if not out:
        raise ConfigError(f"{where}: an empty list builds nothing; give at least one value or null for the default.")
    key = "batch_size" if where.endswith("batch_sizes") else "max_seq_len"
    for i, v in enumerate(out):
        check_count(f"{where}[{i}]", key, v)
    return out


def _reject_unknown_keys(cfg: Any) -> None:
    """Keys added with ``+key=value`` escape the schema's struct check; nothing reads them, so a
    typo there would be silently ignored. Reject them with the key's path."""
    from dataclasses import fields

    for where, node, schema in (("", cfg, BuildConf), ("matrix.", cfg.matrix, MatrixConf)):
        known = {f.name for f in fields(schema)} | ({"hydra"} if not where else set())
        for key in node:
            if key not in known:
                raise ConfigError(
                    f"{where}{key}: unknown key (known: {', '.join(sorted(known - {'hydra'}))}); check its spelling."
                )


def _backend(name: str) -> str:
    from ..backends import backend_path

    backend_path(name)  # a ConfigError naming matrix.backend unless a known name or an import path
    return name


class _Axes:
    """Loads model and device configs once per name, and applies the narrowing overrides."""

    def __init__(self, cfg: Any, choices: dict[str, Any], conf_dirs: tuple[Path, ...] = (CONF_DIR,)) -> None:
        self.conf_dirs = conf_dirs
        self.models: dict[str, Model] = {}
        self.devices: dict[str, Device] = {}
        self.model: Model | None = None
        self.device: Device | None = None
        self.budgets: tuple[Any, ...] | None = None
        for group in ("matrix", "model", "device", "deployment"):
            if choices.get(group) is not None:
                check_name(group, choices[group])
            elif cfg.get(group) is not None:  # `model=[a,b]`: Hydra merges the options into one config
                several = f"matrix.{group}s=[a,b] (one build) or " if group in ("model", "device") else ""
                raise ConfigError(
                    f"{group}: selects several {group} configs at once, which Hydra merges into one nameless "
                    f"{group}; name one ({group}=NAME), or build several with {several}-m {group}=a,b (a sweep)."
                )
        if cfg.model is not None:
            self.model = model_from_node(str(choices.get("model")), cfg.model)
        if cfg.device is not None:
            self.device = device_from_node(str(choices.get("device")), cfg.device)
        if not OmegaConf.is_missing(cfg, "budget"):
            value = _plain(cfg.budget)
            scalar = not isinstance(value, list)
            self.budgets = check_budgets("budget", [value] if scalar else value, scalar=scalar)

    def model_list(self, where: str, names: list[str]) -> tuple[Model, ...]:
        out = []
        for i, n in enumerate(names):
            if n not in self.models:
                self.models[n] = model_from_node(n, load_group_option("model", n, f"{where}[{i}]", self.conf_dirs))
            out.append(self.models[n])
        return tuple(out)

    def device_list(self, where: str, names: list[str]) -> tuple[Device, ...]:
        out = []
        for i, n in enumerate(names):
            if n not in self.devices:
                self.devices[n] = device_from_node(n, load_group_option("device", n, f"{where}[{i}]", self.conf_dirs))
            out.append(self.devices[n])
        return tuple(out)


def _include_node(where: str, entry: Any) -> DictConfig:
    """One ``matrix.include`` entry checked against MatrixIncludeConf; errors name ``where``."""
    from dataclasses import fields

    known = [f.name for f in fields(MatrixIncludeConf)]
    if not isinstance(entry, DictConfig):
        raise ConfigError(
            f"{where}: expected a mapping with some of the keys {', '.join(known)}; got {_plain(entry)!r}."
        )
    for key in map(str, entry):
        if key not in known:
            raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(sorted(known))}); check its spelling.")
        if key in ("models", "devices", "budgets", "kvcache_num_blocks") and entry[key] is None:
            raise ConfigError(f"{where}.{key}: null is not a list; omit the key to take the main matrix's {key}.")
    return merge_structured(MatrixIncludeConf, entry, where)


def _include(axes: _Axes, m: Any, i: int, raw: Any) -> SubMatrix:
    """One include entry: omitted keys from the main matrix (as configured), then narrowed. A
    narrowing override keeps only the entry's cells with the chosen value (it does not replace the
    entry's axis, as it does the main matrix's), so an entry that does not list it yields nothing."""
    where = f"matrix.include[{i}]"
    entry = _include_node(where, raw)

    def get(key: str) -> tuple[str, Any]:
        if OmegaConf.is_missing(entry, key):
            return f"matrix.{key}", _plain(m[key])
        return f"{where}.{key}", _plain(entry[key])

    def narrowed(key: str, chosen: Any, load: Any) -> tuple[Any, ...]:
        at, names = get(key)
        names = check_names(at, names)
        if chosen is not None:  # a narrowing override filters the entry instead of replacing its axis
            return (chosen,) if chosen.name in names else ()
        return tuple(load(at, names))

    models = narrowed("models", axes.model, axes.model_list)
    devices = narrowed("devices", axes.device, axes.device_list)
    budgets_at, budgets = get("budgets")
    budgets = check_budgets(budgets_at, budgets)
    if axes.budgets is not None:
        budgets = tuple(b for b in budgets if any(same_budget(b, n) for n in axes.budgets))
    return SubMatrix(
        where=where,
        models=models,
        devices=devices,
        budgets=budgets,
        batch_sizes=_positive_ints(*get("batch_sizes")),
        max_seq_lens=_positive_ints(*get("max_seq_lens")),
        kvcache_num_blocks=check_blocks(*get("kvcache_num_blocks")),
        attn_impl=get("attn_impl")[1],
        kvcache_partition_len=check_partition(*get("kvcache_partition_len")),
        quantizations=parse_variants(*get("quantizations")),
    )


def _axes_overridden(cfg: Any) -> bool:
    """Whether the command line changed the matrix's own keys (``matrix.batch_sizes=[...]``, ...):
    then the cell ids differ from the configured matrix's, and its ``expect_failure`` entries are not
    checked against them (``_matrix.expand``)."""
    task: list[str] = []
    try:
        if "hydra" in cfg:  # the compose API with return_hydra_config
            task = list(cfg.hydra.overrides.task)
        else:
            from hydra.core.hydra_config import HydraConfig

            task = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    except (OmegaConfBaseException, ValueError, AttributeError):
        task = []
    keys = (o.lstrip("+~").split("=", 1)[0] for o in task)
    return any(k.startswith("matrix.") and not k.startswith("matrix.expect_failure") for k in keys)


def settings_from_config(
    cfg: Any,
    choices: dict[str, Any],
    cwd: Path | None = None,
    conf_dirs: tuple[Path, ...] = (CONF_DIR,),
    recipe_dirs: tuple[Path, ...] = (DEFAULT_RECIPES_DIR,),
) -> BuildSettings:
    """The composed config (and Hydra's group choices) -> frozen BuildSettings. Raises ConfigError.
    ``cwd`` is what relative paths are relative to (a project's root); ``conf_dirs`` and
    ``recipe_dirs`` are searched in order (``_project``). An explicit ``recipes_dir`` replaces
    ``recipe_dirs``."""
    cwd = Path.cwd() if cwd is None else cwd
    _reject_unknown_keys(cfg)
    m = cfg.matrix
    axes = _Axes(cfg, choices, conf_dirs)
    overridden = _axes_overridden(cfg)
    matrix = _matrix(m, axes, overridden)
    declared = None
    if cfg.deployment is None and (axes.model is not None or axes.device is not None or axes.budgets is not None):
        axes.model = axes.device = None  # the same config without the narrowing overrides
        axes.budgets = None
        declared = _matrix(m, axes, overridden)
    deployment = None
    if cfg.deployment is not None:
        from ._deployment import deployment_from_config

        if axes.model is not None or axes.device is not None or axes.budgets is not None:
            raise ConfigError(
                "deployment: a deployment builds exactly its planned cells; model=, device= and budget= do not "
                "apply to it (set them in conf/deployment/<name>.yaml)."
            )
        deployment = deployment_from_config(str(choices.get("deployment")), cfg.deployment, conf_dirs)
        declared = matrix  # a deployment builds its cells alone; the manifest keeps the matrix's others
    build_dir = check_build_dir(cfg.build_dir, cwd)
    if cfg.recipes_dir is not None:
        explicit = Path(str(cfg.recipes_dir))
        recipe_dirs = (explicit if explicit.is_absolute() else cwd / explicit,)
    build_dir = build_dir if build_dir.is_absolute() else cwd / build_dir
    cache_dir = check_cache_dir(cfg.cache.get("dir"), cwd, build_dir)
    return BuildSettings(
        matrix=matrix,
        build_dir=build_dir,
        recipes_dir=recipe_dirs[0],
        progress=bool(cfg.progress),
        deployment=deployment,
        recipe_dirs=recipe_dirs,
        scale=replace(scale_from_config(cfg), cache_dir=None if cache_dir is None else str(cache_dir)),
        declared=declared,
    )


def _matrix(m: Any, axes: _Axes, overridden: bool = False) -> Matrix:
    """The matrix of ``cfg.matrix``, narrowed by ``axes`` (a chosen model, device or budgets);
    ``overridden``: the command line changed its keys (``_axes_overridden``)."""
    if axes.device is not None:
        devices: tuple[Device, ...] = (axes.device,)
    else:
        devices = axes.device_list("matrix.devices", check_names("matrix.devices", _plain(m.devices)))
    if axes.model is not None:
        models: tuple[Model, ...] = (axes.model,)
    else:
        models = axes.model_list("matrix.models", check_names("matrix.models", _plain(m.models)))
    budgets = axes.budgets if axes.budgets is not None else check_budgets("matrix.budgets", _plain(m.budgets))
    return Matrix(
        models=models,
        devices=devices,
        budgets=budgets,
        batch_sizes=_positive_ints("matrix.batch_sizes", m.batch_sizes),
        max_seq_lens=_positive_ints("matrix.max_seq_lens", m.max_seq_lens),
        kvcache_num_blocks=check_blocks("matrix.kvcache_num_blocks", _plain(m.kvcache_num_blocks)),
        attn_impl=_plain(m.attn_impl),
        kvcache_partition_len=check_partition("matrix.kvcache_partition_len", m.kvcache_partition_len),
        quantizations=parse_variants("matrix.quantizations", _plain(m.quantizations)),
        max_perplexity_increase=gate_limit("matrix.max_perplexity_increase", m.max_perplexity_increase),
        min_greedy_agreement=gate_limit("matrix.min_greedy_agreement", m.min_greedy_agreement, 1.0),
        backend=_backend(str(m.backend)),
        expect_failure=tuple(
            ExpectedFailure(*expected_failure_fields(f"matrix.expect_failure[{i}]", e))
            for i, e in enumerate(m.expect_failure)
        ),
        include=tuple(_include(axes, m, i, e) for i, e in enumerate(m.include)),
        narrowed=axes.model is not None or axes.device is not None or axes.budgets is not None or overridden,
    )


def compose_settings(overrides: list[str] | None = None, cwd: Path | None = None, project: Any = None) -> BuildSettings:
    """Compose the root config with ``overrides`` through Hydra's compose API (for dodo.py and
    tests); ``project`` (a ``_project.Project``) layers a project's configs over the shipped ones."""
    from hydra import compose, initialize_config_dir

    register_configs()
    overrides = list(overrides or [])
    for arg in overrides:  # a Hydra override never starts with a dash: an option this command does not know
        if arg.startswith("-"):
            raise ConfigError(
                f"{arg[:100]!r}: not an option of this command, and overrides are KEY=VALUE; check its spelling "
                "(the command's --help lists its options)."
            )
    conf_dirs: tuple[Path, ...] = (CONF_DIR,)
    recipe_dirs: tuple[Path, ...] = (DEFAULT_RECIPES_DIR,)
    if project is not None:
        conf_dirs, recipe_dirs, cwd = project.conf_dirs, project.recipe_dirs, project.root
        searchpath = project.searchpath_override()
        overrides = overrides + ([searchpath] if searchpath else [])
    name = "config" if project is None else project.config_name
    with initialize_config_dir(config_dir=str(conf_dirs[0]), version_base="1.3"):
        cfg = compose(name, overrides=overrides, return_hydra_config=True)
    choices = dict(cfg.hydra.runtime.choices)
    return settings_from_config(cfg, choices, cwd=cwd, conf_dirs=conf_dirs, recipe_dirs=recipe_dirs)
