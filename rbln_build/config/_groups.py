"""Config group options as files: ``conf/<group>/<name>.yaml`` found in the config folders (a
project's first, then the shipped ones), loaded against their schema, and turned into settings."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .._documents import MAX_CONFIG_BYTES, read_document, yaml_problem
from ..errors import ConfigError
from ..memory import shipped_dir
from ._checks import check_count, check_name, check_options
from ._schema import DeviceConf, ModelConf
from ._settings import Device, Model

__all__ = ["CONF_DIR", "list_group_options", "load_group_option", "device_from_node", "model_from_node", "plain"]

CONF_DIR = shipped_dir("conf")  # the shipped configs (a project layers its own over them: _project)


def _dirs(conf_dir: Path | Sequence[Path]) -> tuple[Path, ...]:
    return (conf_dir,) if isinstance(conf_dir, Path) else tuple(conf_dir)


def list_group_options(group: str, conf_dir: Path | Sequence[Path] = CONF_DIR) -> list[str]:
    return sorted({p.stem for d in _dirs(conf_dir) for p in (d / group).glob("*.yaml")})


def _plain(value: Any) -> Any:
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True, enum_to_str=True)
    if isinstance(value, enum.Enum):
        return value.value
    return value


def load_group_option(group: str, name: str, where: str, conf_dir: Path | Sequence[Path] = CONF_DIR) -> DictConfig:
    """Load conf/<group>/<name>.yaml against its schema; errors name the file and the key. With
    several config folders (a project's, then the shipped), the first that has the file wins."""
    schema = {"device": DeviceConf, "model": ModelConf}[group]
    check_name(where, name)
    dirs = _dirs(conf_dir)
    found = [d / group / f"{name}.yaml" for d in dirs] if isinstance(name, str) else []
    path = next((f for f in found if f.is_file()), None)
    if path is None:
        import difflib

        options = list_group_options(group, dirs)
        close = difflib.get_close_matches(str(name), options, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        places = ", ".join(str(d / group) for d in dirs)
        raise ConfigError(f"{where}: unknown {group} {name!r}; {hint}known: {', '.join(options)} (files in {places}).")
    problem = yaml_problem(read_document(path, limit=MAX_CONFIG_BYTES, error=ConfigError))
    if problem is not None:
        raise ConfigError(f"{where}: {path}: {problem}.")
    try:
        return OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.load(path))  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{path}: {exc}".rstrip()) from None


def device_from_node(name: str, node: Any) -> Device:
    check_count(f"device {name} (conf/device/{name}.yaml): num_devices", "num_devices", node.num_devices)
    return Device(name=name, npu=str(node.npu), num_devices=int(node.num_devices))


def model_from_node(name: str, node: Any) -> Model:
    options = {k: _plain(node[k]) for k in node if k != "recipe" and node[k] is not None}
    check_name(f"model {name} (conf/model/{name}.yaml): recipe", node.recipe)
    check_options(f"model {name} (conf/model/{name}.yaml)", options)
    return Model(name=name, recipe=str(node.recipe), options=tuple(sorted(options.items())))


plain = _plain
