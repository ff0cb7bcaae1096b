"""Config for scaling a build out: ``jobs``, the ``executor`` group and the ``cache`` keys.

    jobs=4                                  compile keys in 4 worker processes (null: the cores,
                                            capped by the compile keys to do; 1: in this process)
    executor=ray executor.address=auto      compile keys as Ray tasks (conf/executor/ray.yaml)
    cache.remote=s3://bucket/prefix         a second cache level behind build_dir/cache (fsspec URL)
    cache.require_remote=true               an unreachable remote fails the build instead of a warning
    cache.dir=/shared/rbln-cache            a cache shared by several build dirs (per-key locks; _layout)

The schemas (``ExecutorConf``, ``CacheConf``) are nested in ``BuildConf``; ``scale_from_config``
turns them into one frozen ``Scale`` (nothing downstream sees OmegaConf). Credentials for the remote
never live here: fsspec and s3fs read them from the environment (``AWS_ACCESS_KEY_ID``, ...).
"""

from __future__ import annotations

import enum
import importlib.util
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..estimator._limits import count_problem

__all__ = ["ExecutorKind", "ExecutorConf", "CacheConf", "Scale", "scale_from_config", "REMOTE_SCHEMES"]

REMOTE_SCHEMES = ("file", "s3", "memory")  # memory:// is fsspec's in-process filesystem (tests, demos)
_URL = re.compile(r"([a-z][a-z0-9+.-]*)://(.+)")


class ExecutorKind(enum.Enum):
    local = "local"
    ray = "ray"


@dataclass
class ExecutorConf:
    """conf/executor/<name>.yaml: where compile keys run."""

    kind: ExecutorKind = ExecutorKind.local
    # ray only: "local" starts a private single-node cluster for this build; "auto" joins the running
    # cluster (RAY_ADDRESS or the one started on this machine); anything else is a cluster address.
    address: str = "local"
    num_cpus: float | None = None  # CPUs per compile task; null: the backend's own request (1)
    resources: dict[str, float] = field(default_factory=dict)  # more custom resources per compile task
    max_retries: int = 3  # Ray re-runs a compile whose worker died this many times


@dataclass
class CacheConf:
    remote: str | None = None  # fsspec URL of a shared cache (file:///..., s3://bucket/prefix)
    require_remote: bool = False  # true: an unreachable remote fails the build (else: warn once, build locally)
    dir: str | None = None  # a local cache folder shared by several build dirs (null: build_dir/cache)


@dataclass(frozen=True)
class Scale:
    jobs: int | None = None
    executor: str = "local"
    address: str = "local"
    num_cpus: float | None = None
    resources: tuple[tuple[str, float], ...] = ()
    max_retries: int = 3
    remote: str | None = None
    require_remote: bool = False
    cache_dir: str | None = None  # absolute; set by the settings (relative to the project or cwd)

    def workers(self, todo: int) -> int:
        """Worker processes for ``todo`` compile keys: ``jobs``, or the cores capped by the keys."""
        if self.jobs is not None:
            return self.jobs
        return max(1, min(os.cpu_count() or 1, todo))


def _value(node: Any, key: str) -> Any:
    from omegaconf import DictConfig, OmegaConf

    value = node[key]
    if isinstance(value, DictConfig):
        return OmegaConf.to_container(value, resolve=True)
    if isinstance(value, enum.Enum):
        return value.value
    return value


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def scale_from_config(cfg: Any) -> Scale:
    """``jobs``, ``executor.*`` and ``cache.*`` of the composed config, checked. Raises ConfigError."""
    jobs = cfg.get("jobs")
    if jobs is not None and count_problem("jobs", jobs) is not None:
        raise ConfigError(
            f"jobs: expected a positive number of worker processes (or null for the cores): {count_problem('jobs', jobs)}."
        )
    ex = cfg.executor
    num_cpus = ex.num_cpus
    if num_cpus is not None and num_cpus <= 0:
        raise ConfigError(f"executor.num_cpus: expected a positive number of CPUs per compile, got {num_cpus!r}.")
    resources = _value(ex, "resources") or {}
    for name, amount in resources.items():
        if not isinstance(amount, (int, float)) or amount <= 0:
            raise ConfigError(f"executor.resources.{name}: expected a positive amount, got {amount!r}.")
    retries = count_problem("max_retries", ex.max_retries, zero_ok=True)
    if retries is not None:
        raise ConfigError(f"executor.max_retries: expected 0 or more: {retries}.")
    address = str(ex.address).strip()
    if not address:
        raise ConfigError("executor.address: empty; use local, auto or a cluster address such as 10.0.0.5:6379.")
    kind = _value(ex, "kind")
    if kind == "ray":
        if not _installed("ray"):
            raise ConfigError("executor=ray: Ray is not installed; install it with: pip install 'rbln-build[ray]'")
    remote = cfg.cache.remote
    if remote is not None:
        remote = str(remote).rstrip("/")
        match = _URL.fullmatch(remote)
        if match is None or match.group(1) not in REMOTE_SCHEMES:
            raise ConfigError(
                f"cache.remote: expected an fsspec URL ({', '.join(s + '://...' for s in REMOTE_SCHEMES)}), got {remote!r}."
            )
        # a secret in the config is reported first, whatever is installed
        if re.search(r"://[^/]*@", remote):
            raise ConfigError(
                "cache.remote: the URL holds credentials; give them through the environment "
                "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...) and drop them from the config."
            )
        if not _installed("fsspec"):
            raise ConfigError(
                "cache.remote: a remote cache needs fsspec; install it with: pip install 'rbln-build[remote]'"
            )
        if match.group(1) == "s3" and not _installed("s3fs"):
            raise ConfigError(
                "cache.remote: an s3:// cache needs s3fs; install it with: pip install 'rbln-build[remote]'"
            )
    return Scale(
        jobs=jobs,
        executor=kind,
        address=address,
        num_cpus=None if num_cpus is None else float(num_cpus),
        resources=tuple(sorted((str(k), float(v)) for k, v in resources.items())),
        max_retries=int(ex.max_retries),
        remote=remote,
        require_remote=bool(cfg.cache.require_remote),
    )
