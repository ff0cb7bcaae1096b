"""Config for scaling a build out: ``jobs``, the ``executor`` group and the ``cache`` keys.

    jobs=4                                  compile keys in 4 worker processes (null: the cores,
                                            capped by the compile keys to do; 1: in this process)
    executor=ray executor.address=auto      compile keys as Ray tasks (conf/executor/ray.yaml)
    cache.remote=s3://bucket/prefix         a second cache level behind build_dir/cache (fsspec URL)
    cache.require_remote=true               an unreachable remote fails the build instead of a warning
    cache.dir=/shared/rbln-cache            a cache shared by several build dirs (per-key locks; _layout)
    cache.remote_mode=read                  a consumer: never writes to or deletes from the remote
    cache.connect_timeout=5 cache.read_timeout=10 cache.retries=1    every remote call is bounded
    cache.endpoint=http://host:9000 cache.profile=ci cache.key_env=CI_S3_KEY ...   (names, never values)

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
from ..estimator import count_problem
from ..store import REMOTE_MODES, RemoteOptions

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
    auth_token_env: str | None = None  # the NAME of a variable holding the cluster's token (Ray token auth)


@dataclass
class CacheConf:
    remote: str | None = None  # fsspec URL of a shared cache (file:///..., s3://bucket/prefix)
    require_remote: bool = False  # true: an unreachable remote fails the build (else: warn once, build locally)
    dir: str | None = None  # a local cache folder shared by several build dirs (null: build_dir/cache)
    remote_mode: str = "readwrite"  # read: a consumer that never writes or deletes (CI alone writes)
    connect_timeout: float = 5.0  # seconds to connect to the remote
    read_timeout: float = 10.0  # seconds without a byte from the remote
    retries: int = 1  # extra attempts of a failed remote call
    endpoint: str | None = None  # an S3 API endpoint (else AWS_ENDPOINT_URL, else AWS)
    profile: str | None = None  # an AWS profile
    key_env: str | None = None  # the NAME of the environment variable holding the access key id
    secret_env: str | None = None  # ... the secret access key
    token_env: str | None = None  # ... a session token


@dataclass(frozen=True)
class Scale:
    jobs: int | None = None
    executor: str = "local"
    address: str = "local"
    num_cpus: float | None = None
    resources: tuple[tuple[str, float], ...] = ()
    max_retries: int = 3
    auth_token_env: str | None = None
    remote: str | None = None
    require_remote: bool = False
    cache_dir: str | None = None  # absolute; set by the settings (relative to the project or cwd)
    remote_options: RemoteOptions = RemoteOptions()
    shard: tuple[int, int] | None = None  # shard=I/N: this run builds 1/N of the compile keys (_shard)

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
    options = _remote_options(cfg.cache)
    from ._shard import parse_shard

    shard = parse_shard(cfg.get("shard"), remote, options.writes)
    return Scale(
        shard=shard,
        remote_options=options,
        jobs=jobs,
        executor=kind,
        address=address,
        num_cpus=None if num_cpus is None else float(num_cpus),
        resources=tuple(sorted((str(k), float(v)) for k, v in resources.items())),
        max_retries=int(ex.max_retries),
        auth_token_env=_env_name("executor.auth_token_env", ex.auth_token_env),
        remote=remote,
        require_remote=bool(cfg.cache.require_remote) or shard is not None,  # a shard's work reaches nothing else
    )


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _remote_options(c: Any) -> RemoteOptions:
    """``cache.*`` besides the URL, checked."""
    mode = str(c.remote_mode)
    if mode not in REMOTE_MODES:
        raise ConfigError(f"cache.remote_mode: expected one of {', '.join(REMOTE_MODES)}, got {mode!r}.")
    for name in ("connect_timeout", "read_timeout"):
        value = c[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError(f"cache.{name}: expected a positive number of seconds, got {value!r}.")
    if isinstance(c.retries, bool) or not isinstance(c.retries, int) or c.retries < 0:
        raise ConfigError(f"cache.retries: expected 0 or more extra attempts, got {c.retries!r}.")
    endpoint = c.endpoint
    if endpoint is not None and "@" in str(endpoint):
        raise ConfigError(
            "cache.endpoint: expected an http(s) URL without credentials; the URL holds some. Give them through "
            "the environment (cache.key_env / cache.secret_env name the variables) and drop them from the config."
        )
    if endpoint is not None and (not re.fullmatch(r"https?://[^/@\s]+(/\S*)?", str(endpoint))):
        raise ConfigError(
            f"cache.endpoint: expected an http(s) URL without credentials such as http://10.0.0.5:9000, got {endpoint!r}."
        )
    for name in ("key_env", "secret_env", "token_env"):
        _env_name(f"cache.{name}", c[name])
    return RemoteOptions(
        mode=mode,
        connect_timeout=float(c.connect_timeout),
        read_timeout=float(c.read_timeout),
        retries=int(c.retries),
        endpoint=None if endpoint is None else str(endpoint),
        profile=None if c.profile is None else str(c.profile),
        key_env=None if c.key_env is None else str(c.key_env),
        secret_env=None if c.secret_env is None else str(c.secret_env),
        token_env=None if c.token_env is None else str(c.token_env),
    )


def _env_name(where: str, value: Any) -> str | None:
    """The NAME of an environment variable (never echoed back: it might be a pasted secret)."""
    if value is not None and not _ENV_NAME.fullmatch(str(value)):
        raise ConfigError(
            f"{where}: expected the NAME of an environment variable (such as CI_S3_KEY), not its value; "
            "got something else."
        )
    return None if value is None else str(value)
