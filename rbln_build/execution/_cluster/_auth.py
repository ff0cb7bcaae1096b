"""Token authentication for a driver joining a running Ray cluster, decided from that cluster.

Ray (2.60 here) turns token mode on for a process when ``RAY_AUTH_MODE=token`` is set or, for
``ray start --head`` and ``address=auto``, when a token file exists (``~/.ray/auth_token``, which
any earlier local ``ray.init()`` leaves). A driver in token mode joining a cluster *without* token
authentication connects, but the worker nodes' raylets cannot call it back (``InvalidAuthToken``):
the first task fails with a misleading ``OwnerDiedError`` and the others hang for minutes. So the
mode is never taken from a stray file. Before ``ray.init`` the driver asks the cluster: one call
to its GCS without a token (``probe``, in a subprocess so that Ray's C++ log lines and retries stay
out of the build's output and a hard timeout holds):

* the call succeeds: the cluster has no token authentication; the driver runs with
  ``RAY_AUTH_MODE=disabled`` whatever token files exist. If the user asked for token mode
  (``RAY_AUTH_MODE=token`` or ``executor.auth_token_env``) that is a mismatch: a one-line error.
* the call is refused as unauthenticated: the cluster wants a token. The driver's token (the
  variable ``executor.auth_token_env`` names, ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``,
  ``~/.ray/auth_token``) is checked by a second call; none, or a wrong one, is a one-line error.
  ``RAY_AUTH_MODE=disabled`` set by the user is a mismatch too.
* nothing answers: a one-line error naming the address, within seconds.

``ray://`` addresses (Ray Client) are left to Ray.

A private cluster (``executor.address=local``): Ray 2.60's ``ray.init()`` writes a new token to
``~/.ray/auth_token`` when it finds none (the stray file above). ``private_token`` puts a fresh one in
this process's environment instead, which the cluster's processes inherit: token auth stays on, HOME
is not written. A user's own ``RAY_AUTH_MODE`` or token is left as it is.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from ...errors import ConfigError

__all__ = ["prepare_auth", "private_token", "auth_hint", "probe", "PROBE_TIMEOUT_S"]

PROBE_TIMEOUT_S = 30.0  # the whole probe subprocess (importing Ray takes a few seconds on a loaded host)
CONNECT_TIMEOUT_S = 5.0

# Runs with the environment prepare_auth gives it; prints one word: open, token, or error:<why>.
_PROBE = """
import sys
from ray._raylet import GcsClient
try:
    GcsClient(address=sys.argv[1]).internal_kv_get(b"session_name", b"session", timeout=10)
except Exception as exc:
    text = str(exc)
    if type(exc).__name__ == "AuthenticationError" or "InvalidAuthToken" in text or "Unauthenticated" in text:
        print("token")
    else:
        print("error:" + (text.splitlines()[0][:200] if text else type(exc).__name__))
else:
    print("open")
"""


def _where(address: str) -> str:
    return f"executor.address: the Ray cluster at {address!r}"


def _gcs_address(address: str) -> str | None:
    """host:port of the cluster's GCS for ``address`` (``auto`` as Ray resolves it), or None when
    Ray cannot tell (then ``ray.init`` reports it)."""
    if address.startswith("ray://"):
        return None
    if address != "auto":
        return address
    try:
        from ray._private.services import canonicalize_bootstrap_address

        found = canonicalize_bootstrap_address("auto")
    except Exception:
        return None
    return str(found) if found else None


def _reachable(gcs: str) -> str | None:
    """None when something accepts a TCP connection at ``gcs``; else why not."""
    host, _, port = gcs.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=CONNECT_TIMEOUT_S):
            return None
    except ValueError:
        return f"{gcs!r} is not host:port"
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def probe(gcs: str, token: str | None) -> str:
    """``open``, ``token`` (the cluster refused the call: it wants a token, or this one is wrong) or
    ``error:<why>`` for one GCS call to ``gcs``, made without a token or with ``token``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")}
    env["RAY_AUTH_MODE"] = "disabled" if token is None else "token"
    if token is not None:
        env["RAY_AUTH_TOKEN"] = token
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE, gcs],
            env=env,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"error:no answer in {PROBE_TIMEOUT_S:g} s"
    words = proc.stdout.strip().splitlines()
    return words[-1] if words else f"error:the probe exited with status {proc.returncode}"


def _driver_token(token_env: str | None) -> tuple[str | None, str]:
    """(the driver's token, where it came from)."""
    if token_env:
        token = os.environ.get(token_env)
        if not token:
            raise ConfigError(
                f"executor.auth_token_env: names the environment variable {token_env}, which is not set; set it "
                "to the cluster's token (`ray get-auth-token` on the head node prints it)."
            )
        return token.strip(), f"executor.auth_token_env={token_env}"
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip(), "RAY_AUTH_TOKEN"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None, path
    return (text or None), path


def prepare_auth(address: str, token_env: str | None) -> None:
    """Set this process's ``RAY_AUTH_MODE`` (and token) for joining ``address``, from what the cluster
    answers (see the module docstring); a ConfigError, within seconds, when they cannot agree."""
    asked = os.environ.get("RAY_AUTH_MODE", "").strip().lower() or None
    wants_token = "executor.auth_token_env" if token_env else ("RAY_AUTH_MODE=token" if asked == "token" else None)
    gcs = _gcs_address(address)
    if gcs is None:  # Ray Client, or no running cluster found: ray.init says which
        if token_env:
            _use_token(*_driver_token(token_env))
        return
    why = _reachable(gcs)
    if why is not None:
        raise ConfigError(
            f"{_where(address)} cannot be reached ({why}); start it with `ray start --head`, or use "
            "executor.address=local for a cluster on this machine."
        )
    answer = probe(gcs, None)
    if answer == "open":
        if wants_token:
            raise ConfigError(
                f"{_where(address)} does not use token authentication, but this driver is set to ({wants_token}); "
                "unset it, or start the cluster with token authentication (docs/scaling.md)."
            )
        os.environ["RAY_AUTH_MODE"] = "disabled"  # a token file here must not turn token mode on
        _refresh()
        return
    if answer != "token":
        raise ConfigError(
            f"{_where(address)} does not answer as a Ray cluster ({answer.removeprefix('error:')}); "
            "check executor.address (host:port of the head node's GCS, 6379 by default)."
        )
    if asked == "disabled":
        raise ConfigError(
            f"{_where(address)} uses token authentication, but RAY_AUTH_MODE=disabled is set here; unset it and "
            "give the driver the cluster's token (executor.auth_token_env=NAME_OF_A_VARIABLE_HOLDING_IT)."
        )
    token, source = _driver_token(token_env)
    if token is None:
        raise ConfigError(f"{_where(address)} uses token authentication and this driver has no token; {auth_hint()}.")
    if probe(gcs, token) != "open":
        raise ConfigError(
            f"{_where(address)} refuses the token from {source}: it is not that cluster's token; "
            "`ray get-auth-token` on the head node prints the right one."
        )
    _use_token(token, source)


def private_token() -> dict[str, str | None]:
    """Before ``ray.init`` of a private cluster: a fresh token in this process's environment (see the
    module docstring), unless the user set the mode or a token. Returns what to restore afterwards
    (``restore``): the variables set, each with its value before."""
    if any(os.environ.get(name) for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
        return {}
    import secrets

    saved = {name: os.environ.get(name) for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)  # 256 bits, as Ray's own generator
    _refresh()
    return saved


def restore(saved: dict[str, str | None]) -> None:
    """Undo ``private_token`` (after the private cluster stopped)."""
    for name, old in saved.items():
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
    if saved:
        _refresh()


def _use_token(token: str | None, source: str) -> None:
    os.environ["RAY_AUTH_MODE"] = "token"
    if token is not None:
        os.environ["RAY_AUTH_TOKEN"] = token  # the one checked, whatever file Ray would read first
        os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
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


def auth_hint() -> str:
    mode = os.environ.get("RAY_AUTH_MODE")
    return (
        "give the driver the cluster's token (`ray get-auth-token` on the head node prints it): "
        "executor.auth_token_env=NAME_OF_A_VARIABLE_HOLDING_IT, RAY_AUTH_TOKEN, or ~/.ray/auth_token"
        + (f" (RAY_AUTH_MODE={mode} is set here)" if mode else "")
    )
