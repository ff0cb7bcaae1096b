"""How the remote cache talks to its filesystem: options, bounded calls, write-once publishing.

``RemoteOptions`` is what ``cache.*`` configures besides the URL (mode, timeouts, an S3 endpoint and
profile, the *names* of the environment variables holding credentials). It is plain data, picklable,
and holds no secret: the values are read from the environment of the process that opens the remote
(a worker reads its own), so nothing secret reaches a manifest, a log or a Ray task's arguments.

Every remote call is bounded twice: by the client's own timeouts (s3fs/botocore ``connect_timeout``
and ``read_timeout``, with ``retries`` extra attempts), and by a deadline on the call itself
(``bounded``): a call that has not returned by then raises ``RemoteTimeout`` and is abandoned on a
daemon thread. A server that accepts a connection and never answers therefore costs at most
``call_timeout`` seconds once per run (the remote is then treated as down), never a hung build.

``publish_if_absent`` makes a name write-once for real: ``os.link`` on a filesystem (fails if the
name exists), a conditional PUT (``If-None-Match: *``) on S3; where neither is available, a check
before and a read-back after (verify-after-publish). The caller learns whether its bytes won.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import CacheError

__all__ = [
    "RemoteOptions",
    "RemoteTimeout",
    "REMOTE_MODES",
    "DOWN_MARKER",
    "bounded",
    "once_key",
    "open_filesystem",
    "publish_if_absent",
    "transient",
    "with_retries",
    "BACKOFF_S",
    "clean_stale",
]

REMOTE_MODES = ("readwrite", "read")
DOWN_MARKER = ".remote-unreachable"  # in the local cache: this run found the remote down (workers stay quiet)
TRANSFER_TIMEOUT_S = 3600.0  # a whole blob upload/download (each socket read is bounded by read_timeout)
T = TypeVar("T")
# waits before each retry of one key's transfer after a transient error (a 5xx, a reset connection);
# errors that will not pass (auth, a missing bucket, a server that does not answer) are not retried
BACKOFF_S = (0.2, 1.0, 3.0)
_TRANSIENT_CODES = {"InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout", "500", "502", "503", "504"}


class RemoteTimeout(TimeoutError):
    """A remote call that did not return within its deadline."""


@dataclass(frozen=True)
class RemoteOptions:
    mode: str = "readwrite"  # read: never writes, never deletes (consumers of a CI-filled cache)
    connect_timeout: float = 5.0  # seconds to open a connection
    read_timeout: float = 10.0  # seconds without a byte from the server
    retries: int = 1  # extra attempts of a failed call (s3fs), each bounded by the timeouts
    endpoint: str | None = None  # S3 API endpoint (else AWS_ENDPOINT_URL or AWS)
    profile: str | None = None  # an AWS profile name (~/.aws/config)
    key_env: str | None = None  # NAMES of environment variables holding the credentials, never values
    secret_env: str | None = None
    token_env: str | None = None

    @property
    def writes(self) -> bool:
        return self.mode != "read"

    @property
    def call_timeout(self) -> float:
        """The deadline of one metadata call (a pointer read, an exists, a listing)."""
        return (1 + self.retries) * (self.connect_timeout + self.read_timeout) + 2.0

    def env_names(self) -> tuple[str, ...]:
        """The environment variables a worker needs to open the remote as this process does."""
        named = [n for n in (self.key_env, self.secret_env, self.token_env) if n]
        return tuple(named)


def once_key(message: str) -> str:
    """What makes a warning the same one: an unreachable remote is one warning per run, whatever
    each worker's exception said."""
    if message.startswith("cache.remote: ") and " cannot be reached (" in message:
        return message.split(" cannot be reached (", 1)[0]
    return message


def _credential(name: str | None, what: str) -> str | None:
    if not name:
        return None
    value = os.environ.get(name)
    if not value:
        raise CacheError(
            f"cache.{what}: names the environment variable {name}, which is not set in this process "
            f"(pid {os.getpid()}); set it where the build (and every worker) runs, or drop cache.{what}."
        )
    return value


def storage_options(scheme: str, options: RemoteOptions) -> dict[str, Any]:
    """fsspec storage options for ``scheme`` (secrets read from the environment here, at open)."""
    if scheme != "s3":
        return {}
    so: dict[str, Any] = {
        "skip_instance_cache": True,
        "config_kwargs": {
            "connect_timeout": options.connect_timeout,
            "read_timeout": options.read_timeout,
            "retries": {"total_max_attempts": 1},  # s3fs retries (options.retries); one layer only
        },
    }
    if options.endpoint:
        so["endpoint_url"] = options.endpoint
    if options.profile:
        so["profile"] = options.profile
    key, secret = _credential(options.key_env, "key_env"), _credential(options.secret_env, "secret_env")
    token = _credential(options.token_env, "token_env")
    if key is not None:
        so["key"] = key
    if secret is not None:
        so["secret"] = secret
    if token is not None:
        so["token"] = token
    return so


def open_filesystem(url: str, options: RemoteOptions) -> tuple[Any, str]:
    """(filesystem, base path) for ``url``. Raises CacheError when its package is missing."""
    import fsspec  # type: ignore[import-untyped]

    scheme = url.split("://", 1)[0]
    try:
        fs, base = fsspec.url_to_fs(url, **storage_options(scheme, options))
    except ImportError as exc:
        raise CacheError(
            f"cache.remote: {url} needs a filesystem package that is not installed ({exc}); "
            "install it with: pip install 'rbln-build[remote]'"
        ) from None
    if scheme == "s3":
        fs.retries = 1 + options.retries  # s3fs's own retry loop (attempts, with a short backoff)
    return fs, base.rstrip("/")


def bounded(timeout: float | None, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, or RemoteTimeout when it has not returned within ``timeout`` seconds
    (it is then left to finish on a daemon thread; its result is dropped)."""
    if timeout is None:
        return fn(*args, **kwargs)
    box: dict[str, Any] = {}
    finished = threading.Event()

    def run() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller
            box["error"] = exc
        finally:
            finished.set()

    threading.Thread(target=run, name="rbln-build remote call", daemon=True).start()
    if not finished.wait(timeout):
        raise RemoteTimeout(f"no answer within {timeout:g}s")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def publish_if_absent(fs: Any, final: str, data: bytes, timeout: float | None, staging: str) -> bool:
    """Write ``data`` at ``final`` unless something is there already. True when ours stands.
    ``staging`` is a folder of the remote for a filesystem's private copy."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        return bool(bounded(timeout, _link_if_absent, final, data, staging))
    if protocol in ("s3", "s3a"):
        try:
            bounded(timeout, fs.pipe_file, final, data, mode="create")
            return True
        except FileExistsError:
            return bool(bounded(timeout, fs.cat_file, final) == data)
        except NotImplementedError:
            pass  # a server without conditional writes: verify after publishing instead
        except OSError as exc:
            if "notimplemented" not in str(exc).lower().replace(" ", ""):
                raise
    if bounded(timeout, fs.exists, final):
        return bool(bounded(timeout, fs.cat_file, final) == data)
    bounded(timeout, fs.pipe_file, final, data)
    return bool(bounded(timeout, fs.cat_file, final) == data)  # someone else's write may have landed last


def _link_if_absent(final: str, data: bytes, staging: str) -> bool:
    """A filesystem: write a private file, then ``link`` it to the final name (atomic; fails if the
    name exists, unlike rename)."""
    import uuid

    os.makedirs(os.path.dirname(final), exist_ok=True)
    os.makedirs(staging, exist_ok=True)
    staged = os.path.join(staging, uuid.uuid4().hex)
    try:
        with open(staged, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(staged, final)
            return True
        except FileExistsError:
            with open(final, "rb") as f:
                return f.read() == data
    finally:
        try:
            os.unlink(staged)
        except FileNotFoundError:
            pass


def transient(exc: BaseException) -> bool:
    """Will ``exc`` pass if the call is made again? A 5xx answer (s3fs turns S3's ``InternalError``
    into an OSError EREMOTEIO and keeps botocore's error as its cause), a throttle, a connection reset
    by the peer. Not: credentials refused or missing, a missing bucket, a refused connection or a
    call that timed out (the server is gone: the remote is off for the run, as documented)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, (RemoteTimeout, PermissionError, FileNotFoundError, CacheError)):
            return False
        if isinstance(cause, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
            return True
        if isinstance(cause, OSError) and cause.errno == errno.EREMOTEIO:
            return True
        response = getattr(cause, "response", None)
        if isinstance(response, dict):
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if (isinstance(status, int) and status >= 500) or (response.get("Error") or {}).get(
                "Code"
            ) in _TRANSIENT_CODES:
                return True
        if type(cause).__name__ == "ConnectionClosedError":  # botocore: the peer closed mid-answer
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def with_retries(op: Callable[[], T], sleep: Callable[[float], None] = time.sleep) -> T:
    """``op()``, made again after each transient error (``transient``) with the waits of
    ``BACKOFF_S``; the last error, or any other, is raised."""
    for wait in BACKOFF_S:
        try:
            return op()
        except Exception as exc:
            if not transient(exc):
                raise
        sleep(wait)
    return op()


def clean_stale(fs: Any, folder: str, age_s: float) -> int:
    """Remove the files of ``folder`` (the remote's ``tmp/``) last modified over ``age_s`` seconds
    ago: what killed uploads left (an upload in progress is younger). Returns how many."""
    import datetime

    try:
        listing = fs.ls(folder, detail=True)
    except FileNotFoundError:
        return 0
    now = datetime.datetime.now(datetime.UTC)
    removed = 0
    for info in listing:
        stamp = info.get("LastModified") or info.get("mtime") or info.get("created")
        if isinstance(stamp, (int, float)):
            stamp = datetime.datetime.fromtimestamp(stamp, datetime.UTC)
        if info.get("type") == "file" and isinstance(stamp, datetime.datetime):
            if stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=datetime.UTC)
            if (now - stamp).total_seconds() > age_s:
                fs.rm_file(info["name"])
                removed += 1
    return removed
