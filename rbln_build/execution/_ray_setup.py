"""Before ``ray.init``: a temp dir whose socket paths fit, token authentication, the workers' environment.

* **Socket paths.** Ray puts its Unix sockets under ``<temp dir>/session_<date>_<time>_<pid>/sockets/``
  and Linux limits a socket path to 107 bytes, so a private cluster under a long ``RAY_TMPDIR`` or
  ``TMPDIR`` (a CI workspace, a pytest folder) cannot start. A private cluster then gets a short
  folder of its own under ``/tmp`` instead, removed when the build ends.
* **Token authentication.** Ray (2.60 here) turns it on for ``ray start --head`` and writes the token
  to ``~/.ray/auth_token``, but a driver given an explicit address does not turn it on by itself.
  With ``RAY_AUTH_MODE`` unset, the build turns token mode on when a token is available: the
  variable ``executor.auth_token_env`` names, ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or
  ``~/.ray/auth_token``. ``RAY_AUTH_MODE=disabled`` (or ``token``) set by the user stands.
* **The workers' environment.** The remote cache's credentials are read from variables whose names the
  config holds (``cache.key_env`` ...). A Ray task gets those variables (names and values) in its
  ``runtime_env``, so a node started without them still writes to the cache; the values are never
  in a task's arguments, a manifest or the build's output.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["short_temp_dir", "prepare_auth", "task_env", "remove_temp_dir", "MAX_TEMP_DIR"]

# 107 bytes, less "/session_2026-12-01_04-18-24_123456_1234567/sockets/" (52) and the longest socket
# name Ray uses there ("plasma_store", "raylet", with room to spare: 16).
MAX_TEMP_DIR = 107 - 52 - 16


def _chosen_temp_dir() -> str:
    """Where Ray would put a private cluster's files (its own rule: RAY_TMPDIR, TMPDIR, /tmp)."""
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(base, "ray")


def short_temp_dir() -> str | None:
    """A short private folder for a private cluster when Ray's own choice is too long; else None."""
    if len(_chosen_temp_dir()) <= MAX_TEMP_DIR:
        return None
    for base in ("/tmp", "/var/tmp", str(Path.home())):
        try:
            folder = tempfile.mkdtemp(prefix="rbr-", dir=base)
        except OSError:
            continue
        if len(folder) <= MAX_TEMP_DIR:
            return folder
        shutil.rmtree(folder, ignore_errors=True)
    raise ConfigError(
        f"executor=ray: Ray's folder {_chosen_temp_dir()} is too long for its Unix sockets (a path may hold "
        f"107 bytes) and no short folder could be made in /tmp; set RAY_TMPDIR to a path of at most "
        f"{MAX_TEMP_DIR - 4} characters."
    )


def remove_temp_dir(folder: str | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def prepare_auth(token_env: str | None) -> None:
    """Token mode for a driver joining a cluster at an explicit address (see the module docstring)."""
    if token_env:
        token = os.environ.get(token_env)
        if not token:
            raise ConfigError(
                f"executor.auth_token_env: names the environment variable {token_env}, which is not set; set it "
                "to the cluster's token (`ray get-auth-token` on the head node prints it)."
            )
        os.environ["RAY_AUTH_TOKEN"] = token
        os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    if "RAY_AUTH_MODE" in os.environ:
        _refresh()
        return
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.isfile(path):
        os.environ["RAY_AUTH_MODE"] = "token"
        _refresh()


def _refresh() -> None:
    """Make an already imported Ray read RAY_AUTH_MODE and the token again (as ``ray`` itself does
    when it turns token mode on)."""
    try:
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    except (ImportError, AttributeError):
        pass  # another Ray: it reads the environment when it starts


def task_env(names: tuple[str, ...]) -> dict[str, Any]:
    """A Ray ``runtime_env`` carrying the named variables of this process (those that are set)."""
    values = {n: os.environ[n] for n in names if os.environ.get(n)}
    return {"env_vars": values} if values else {}


def auth_hint() -> str:
    mode = os.environ.get("RAY_AUTH_MODE")
    return (
        "if the cluster uses token authentication (`ray start --head` turns it on in Ray 2.60), give the driver "
        "its token: ~/.ray/auth_token, RAY_AUTH_TOKEN, or executor.auth_token_env=NAME_OF_A_VARIABLE_HOLDING_IT"
        + (f" (RAY_AUTH_MODE={mode} is set here)" if mode else "")
    )
