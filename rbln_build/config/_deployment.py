"""The ``deployment`` config group: several models that share one device target.

``conf/deployment/<name>.yaml`` names its schema (``defaults: [deployment_schema, _self_]``, the
Hydra structured-config pattern) and is checked against ``DeploymentConf`` at composition;
``deployment_from_config`` checks it again (a file that forgets its schema line gets the same
errors, each naming its key) and turns it into a frozen ``Deployment``::

    device: rebel100                 # conf/device/<name>.yaml: the one target every model shares
    mode: budget                     # what `rbln-build deployment=<name>` builds: budget | blocks
    models:
      - model: qwen3_8b              # conf/model/<name>.yaml
        name: null                   # its name in the deployment (cell ids, ports); null: model
        batch_size: 8                # null: the model's default; likewise max_seq_len (tokens)
        max_seq_len: 40960
        min_blocks: null             # null: the floor
        weight: 1.0                  # who gets the room left once every model has its max-min share
        memory_budget: null          # fixed budget (any memory_budget form): not planned, accounted for
        port: null                   # serve-command; null: serve.port + its index
        traffic: {concurrent_sequences: 4, prompt_tokens: 2000, output_tokens: 500}   # its blocks first
    reservations:                    # bytes per device held for tenants that are not LLMs
      - {name: vision_encoder, bytes: 4GB, chiplet: null}   # chiplet null: spread evenly
    margin: 512MB                    # held back on every chiplet: bytes, or a fraction (0.02) of a chiplet
    device_margins: [null, 1GB]      # one per device of the target, replacing `margin` there; null: `margin`
    solver: {method: auto, time_limit: 60}   # auto | search | cp-sat (the solver extra); seconds for cp-sat
    server: {cards: 2, pins: {qwen3_8b: 0}}   # null: one card; else the models placed on N cards of `device`
    serve: {port: 8000, device_ids: null}   # device_ids null: 0 .. num_devices-1 (x cards on a server)

Only this module and ``_config`` touch OmegaConf for deployments.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field, fields
from fractions import Fraction
from typing import Any, List, Optional

from omegaconf import MISSING, DictConfig, ListConfig

from ..deploy import (
    SOLVERS,
    Margin,
    Margins,
    Reservation,
    Solver,
    Traffic,
    bounded_count,
    bytes_from,
    margin_from,
    traffic_from,
)
from ..deploy.server import ServerSpec, server_from
from ..errors import ConfigError, EstimateError
from ..estimator import LIMITS, check_budget, resolve_npu
from ._groups import _plain, device_from_node, load_group_option, model_from_node
from ._schema import merge_structured
from ._settings import Device, Model

__all__ = [
    "DeploymentMode",
    "DeploymentModelConf",
    "ReservationConf",
    "ServeConf",
    "TrafficConf",
    "SolverConf",
    "DeploymentConf",
    "DeploymentModel",
    "Deployment",
    "SCHEMA_NAME",
    "register_deployment_schema",
    "deployment_from_config",
]

SCHEMA_NAME = "deployment_schema"


class DeploymentMode(enum.Enum):
    budget = "budget"  # each planned model is built at its planned memory_budget
    blocks = "blocks"  # each planned model is built with its planned explicit kvcache_num_blocks


@dataclass
class TrafficConf:
    concurrent_sequences: Optional[int] = None  # sequences it must hold at once; or the next two
    requests_per_s: Optional[float] = None  # x seconds_per_request = concurrent sequences (Little's law)
    seconds_per_request: Optional[float] = None
    prompt_tokens: Optional[int] = None  # mean; with output_tokens, a sequence's length (null: max_seq_len)
    output_tokens: Optional[int] = None


@dataclass
class DeploymentModelConf:
    model: str = MISSING  # conf/model/<name>.yaml
    name: Optional[str] = None  # null: the model's name
    batch_size: Optional[int] = None  # null: the model's default
    max_seq_len: Optional[int] = None  # tokens; null: the model's default
    min_blocks: Optional[int] = None  # null: the floor
    weight: float = 1.0
    memory_budget: Any = None  # a fixed budget: this model is not planned
    port: Optional[int] = None  # null: serve.port + the model's index
    traffic: Any = None  # a TrafficConf mapping: what it must serve (its blocks first, then the rest is shared)


@dataclass
class ReservationConf:
    name: str = MISSING
    bytes: Any = MISSING  # per device: an int, or a byte string with a binary unit ("4GB")
    chiplet: Optional[int] = None  # null: spread evenly over the chiplets


@dataclass
class ServeConf:
    port: int = 8000  # the first model's port; the others follow in order
    device_ids: Optional[List[int]] = None  # RBLN_VISIBLE_DEVICES; null: 0 .. num_devices-1


@dataclass
class SolverConf:
    method: str = "auto"  # auto: the search, then CP-SAT past a few thousand nodes | search | cp-sat
    time_limit: float = 60.0  # seconds CP-SAT may take per plan; past it the best plan found, and its gap


@dataclass
class DeploymentConf:
    """conf/deployment/<name>.yaml: models that share one device target."""

    device: str = MISSING
    mode: DeploymentMode = DeploymentMode.budget
    models: List[DeploymentModelConf] = MISSING
    reservations: List[ReservationConf] = field(default_factory=list)
    margin: Any = None  # per chiplet: bytes (int or "512MB") or a fraction of the chiplet in [0, 1); null: none
    device_margins: Optional[List[Any]] = None  # one per device of the target (null entries: `margin`)
    solver: SolverConf = field(default_factory=SolverConf)
    server: Any = None  # {cards: N, pins: {MODEL: CARD}} (deploy.server.ServerSpec); null: they share one card
    serve: ServeConf = field(default_factory=ServeConf)


def register_deployment_schema() -> None:
    """Store ``DeploymentConf`` as the group's schema (called by ``_config.register_configs``)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=SCHEMA_NAME, node=DeploymentConf)


@dataclass(frozen=True)
class DeploymentModel:
    name: str
    model: Model  # the model config (conf/model/<model>.yaml) it builds from
    batch_size: int | None
    max_seq_len: int | None
    min_blocks: int | None
    weight: Fraction
    memory_budget: Any
    port: int
    traffic: Traffic | None = None


@dataclass(frozen=True)
class Deployment:
    name: str
    device: Device
    mode: str
    models: tuple[DeploymentModel, ...]
    reservations: tuple[Reservation, ...]
    device_ids: tuple[int, ...]
    margins: Margins = Margins()
    solver: Solver = Solver()
    server: ServerSpec | None = None  # the models placed on several cards (device_ids: every card's, in order)

    def model(self, name: str) -> DeploymentModel:
        return next(m for m in self.models if m.name == name)


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def _merge(schema: type, node: Any, where: str, name: str) -> DictConfig:
    return merge_structured(schema, node, where, f" (conf/deployment/{name}.yaml)")


def _checked(name: str, node: Any) -> DictConfig:
    """The node merged over the schema; an error names its key (``deployment.models[1].batch_size``)."""
    if not isinstance(node, DictConfig):
        raise ConfigError(
            f"deployment ({name}): expected a mapping with the keys {', '.join(f.name for f in fields(DeploymentConf))}."
        )
    for key, schema in (("models", DeploymentModelConf), ("reservations", ReservationConf)):
        entries = node.get(key)
        if isinstance(entries, ListConfig):  # each entry alone, so that an error names its index
            for i, entry in enumerate(entries):
                _merge(schema, entry, f"deployment.{key}[{i}]", name)
    return _merge(DeploymentConf, node, "deployment", name)


def _margins(name: str, cfg: DictConfig, device: Device) -> Margins:
    available = resolve_npu(device.npu).available_per_chiplet
    margin = _plain(cfg.margin)
    default = Margin() if margin is None else margin_from("deployment.margin", margin, available)
    per_device = _plain(cfg.device_margins)
    if per_device is None:
        return Margins(default)
    if len(per_device) != device.num_devices:
        raise ConfigError(
            f"deployment.device_margins ({name}): expected one entry per device of {device.name} "
            f"(num_devices {device.num_devices}; null keeps `margin` there), got {len(per_device)}: {per_device}."
        )
    devices = tuple(
        (i, margin_from(f"deployment.device_margins[{i}]", v, available))
        for i, v in enumerate(per_device)
        if v is not None
    )
    return Margins(default, devices)


def _traffic(where: str, node: Any) -> Traffic | None:
    """A model's traffic: concurrent sequences, or requests/s with seconds per request; token counts optional."""
    if node is None:
        return None
    where = f"{where}.traffic"
    given = _plain(node)
    keys = [f.name for f in fields(TrafficConf)]
    if not isinstance(given, dict):
        raise ConfigError(f"{where}: expected a mapping with some of the keys {', '.join(keys)}, got {given!r}.")
    for key in given:
        if key not in keys:
            raise ConfigError(f"{where}.{key}: not a traffic key; expected some of {', '.join(keys)}.")
    return traffic_from({k: given.get(k) for k in keys}, where)


def _solver(cfg: DictConfig) -> Solver:
    method = str(cfg.solver.method)
    if method not in SOLVERS:
        raise ConfigError(f"deployment.solver.method: expected one of {', '.join(SOLVERS)}, got {method!r}.")
    limit = float(cfg.solver.time_limit)
    if not 0 < limit <= 86_400:
        raise ConfigError(f"deployment.solver.time_limit: expected seconds above 0 and at most 86400, got {limit:g}.")
    return Solver(method, limit)


def deployment_from_config(name: str, node: Any, conf_dirs: Any = None) -> Deployment:
    """The composed ``deployment`` node -> a frozen Deployment. Raises ConfigError naming the key.
    ``conf_dirs``: the config folders searched for models and devices (a project's, then the shipped)."""
    dirs = {} if conf_dirs is None else {"conf_dir": conf_dirs}
    cfg = _checked(name, node)
    device = device_from_node(
        str(cfg.device), load_group_option("device", str(cfg.device), "deployment.device", **dirs)
    )
    if not cfg.models:
        raise ConfigError(f"deployment.models ({name}): an empty list deploys nothing; list at least one model.")
    port = bounded_count("deployment.serve.port", cfg.serve.port, limit=65535 - len(cfg.models)) or 0
    models: list[DeploymentModel] = []
    for i, m in enumerate(cfg.models):
        where = f"deployment.models[{i}]"
        model = model_from_node(str(m.model), load_group_option("model", str(m.model), f"{where}.model", **dirs))
        label = str(m.name) if m.name is not None else model.name
        if not _NAME.fullmatch(label):
            raise ConfigError(f"{where}.name: {label!r} must be letters, digits, '_' or '-' (it names cells).")
        if any(label == other.name for other in models):
            raise ConfigError(f"{where}: the name {label!r} is used twice; give one of them another `name`.")
        weight = float(m.weight)
        if not weight > 0 or weight == float("inf"):
            raise ConfigError(f"{where}.weight: expected a positive number, got {m.weight}.")
        budget = _plain(m.memory_budget)
        if budget is not None:
            if isinstance(budget, (list, dict)):
                raise ConfigError(f"{where}.memory_budget: a budget is null, a number or a string, got {budget!r}.")
            try:
                check_budget(budget)
            except EstimateError as exc:
                raise ConfigError(f"{where}.memory_budget: {exc}") from None
            if m.min_blocks is not None:
                raise ConfigError(
                    f"{where}: memory_budget fixes this model's count, so min_blocks does not apply; remove one."
                )
        models.append(
            DeploymentModel(
                name=label,
                model=model,
                batch_size=bounded_count(f"{where}.batch_size", m.batch_size, limit="batch_size"),
                max_seq_len=bounded_count(f"{where}.max_seq_len", m.max_seq_len, limit="max_seq_len"),
                min_blocks=bounded_count(f"{where}.min_blocks", m.min_blocks, limit="kvcache_num_blocks"),
                weight=Fraction(weight),
                memory_budget=budget,
                port=bounded_count(f"{where}.port", m.port, limit=65535 - len(cfg.models)) or port + i,
                traffic=_traffic(where, m.traffic),
            )
        )
    ports = [m.port for m in models]
    if len(set(ports)) != len(ports):
        raise ConfigError(f"deployment.models ({name}): two models share a port ({ports}); set `port` on one of them.")
    reservations: list[Reservation] = []
    for i, r in enumerate(cfg.reservations):
        where = f"deployment.reservations[{i}]"
        if any(str(r.name) == other.name for other in reservations):
            raise ConfigError(f"{where}.name: {r.name!r} is used twice.")
        chiplet = bounded_count(f"{where}.chiplet", r.chiplet, minimum=0, limit=LIMITS["num_devices"])
        reservations.append(Reservation(str(r.name), bytes_from(f"{where}.bytes", _plain(r.bytes)), chiplet))
    server = server_from(_plain(cfg.server), [m.name for m in models])
    ids, count = _plain(cfg.serve.device_ids), device.num_devices * (server.cards if server else 1)
    if ids is None:
        ids = list(range(count))
    if len(ids) != count or len(set(ids)) != len(ids) or any(i < 0 for i in ids):
        cards = f", x {server.cards} cards of the server" if server else ""
        raise ConfigError(
            f"deployment.serve.device_ids ({name}): expected {count} distinct device number(s) for "
            f"{device.name} (num_devices {device.num_devices}{cards}), got {ids}."
        )
    return Deployment(
        name=name,
        device=device,
        mode=_plain(cfg.mode),
        models=tuple(models),
        reservations=tuple(reservations),
        device_ids=tuple(ids),
        margins=_margins(name, cfg, device),
        solver=_solver(cfg),
        server=server,
    )
