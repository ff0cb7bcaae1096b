"""executor=ray against the cluster a team starts by hand: ``ray start --head`` (Ray 2.60 turns token
authentication on when ``~/.ray/auth_token`` exists, which any earlier local ``ray.init()`` leaves),
all on 127.0.0.1. The driver asks the cluster whether it wants a token, finds its token
(``executor.auth_token_env`` here) and gives a local build's manifest; without a token it is a
configuration error that says how to give one. A private cluster under a
temp dir too long for Ray's Unix sockets still starts (the build gives it a short folder)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli import PLANS, check_ok, plans_build, rbln, summary  # noqa: F401 (a fixture)

pytest.importorskip(
    "ray", reason="ray is not installed: executor=ray needs the ray extra (pip install 'rbln-build[ray]')"
)
pytestmark = [pytest.mark.slow, pytest.mark.integration]
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(home: Path, **more: str) -> dict[str, str]:
    """What a process of this test gets on top of os.environ: its own HOME (Ray's token lives there)."""
    return {**LOOPBACK_ENV, "HOME": str(home), **more}


def _full(env: dict[str, str]) -> dict[str, str]:
    return dict(os.environ, **env)


@pytest.fixture
def head(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``ray start --head --block`` with its own HOME (where Ray writes the token) and a short temp
    dir; stopped by killing its process group (never `ray stop`, which would stop every cluster on
    the machine)."""
    home = tmp_path / "head-home"
    home.mkdir()
    # A token in ~/.ray (as any earlier `ray.init()` on that machine leaves): `ray start --head` then
    # turns token authentication on, the setup the issue met.
    subprocess.run(
        [sys.executable, "-m", "ray.scripts.scripts", "get-auth-token", "--generate"],
        env=_full(_env(home)),
        check=True,
        capture_output=True,
        timeout=120,
    )
    port = _free_port()
    temp = Path(f"/tmp/rbt-{os.getpid()}-{port}")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            "--include-dashboard=false",
            "--num-cpus=2",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        env=_full(_env(home)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        token = home / ".ray" / "auth_token"
        deadline = time.time() + 180
        while time.time() < deadline and proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    if token.is_file():
                        break
            except OSError:
                pass
            time.sleep(0.5)
        assert proc.poll() is None and token.is_file(), "ray start --head did not come up with a token"
        yield f"127.0.0.1:{port}", token
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
            except ProcessLookupError:
                pass
        import shutil

        shutil.rmtree(temp, ignore_errors=True)


def test_a_token_authenticated_cluster_builds_and_a_missing_token_says_how_to_give_one(
    plans_build: Path,  # noqa: F811
    tmp_path: Path,
    head: tuple[str, Path],
) -> None:
    address, token = head
    args = [*PLANS, "executor=ray", f"executor.address={address}"]
    stranger = tmp_path / "no-token-home"
    stranger.mkdir()

    denied = rbln([*args, f"build_dir={tmp_path / 'denied'}"], cwd=tmp_path, env=_env(stranger), timeout=300)
    check_ok(denied, 2)
    assert (
        f"executor.address: the Ray cluster at '{address}' uses token authentication and this driver has no token"
        in denied.stderr
    )
    assert "executor.auth_token_env" in denied.stderr and "Traceback" not in denied.stderr

    out = tmp_path / "by-variable"  # the token in a variable the config names (a CI secret)
    proc = rbln(
        [*args, f"build_dir={out}", "executor.auth_token_env=CLUSTER_TOKEN"],
        cwd=tmp_path,
        env=_env(stranger, CLUSTER_TOKEN=token.read_text().strip()),
        timeout=600,
    )
    check_ok(proc)
    assert summary(out)["compiled"] == 4 and proc.stderr.count(": plan (") == 4
    assert token.read_text().strip() not in proc.stderr + proc.stdout
    assert (out / "manifest.json").read_bytes() == (plans_build / "manifest.json").read_bytes()


def test_a_private_cluster_starts_under_a_temp_dir_too_long_for_unix_sockets(
    plans_build: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    long_dir = tmp_path / ("x" * 60) / ("y" * 60)
    long_dir.mkdir(parents=True)
    home = tmp_path / "home"
    home.mkdir()
    out = tmp_path / "build"
    proc = rbln(
        [*PLANS, "executor=ray", "executor.address=local", f"build_dir={out}"],
        cwd=tmp_path,
        env=_env(home, RAY_TMPDIR=str(long_dir)),
        timeout=600,
    )
    check_ok(proc)
    assert len(str(long_dir)) > 107
    assert (out / "manifest.json").read_bytes() == (plans_build / "manifest.json").read_bytes()
    assert not list(Path("/tmp").glob("rbr-*/session_*"))  # the short folder went with the cluster


def test_ray_workers_publish_to_the_remote_and_the_driver_fetches_from_it(
    plans_build: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    remote = tmp_path / "remote"
    out = tmp_path / "build"
    proc = rbln(
        [*PLANS, "executor=ray", "executor.address=local", f"build_dir={out}", f"cache.remote=file://{remote}"],
        cwd=tmp_path,
        env=_env(home, RAY_TMPDIR=str(tmp_path / "r")),
        timeout=600,
    )
    check_ok(proc)
    assert summary(out)["compiled"] == 4 and proc.stderr.count(": plan (") == 4
    assert len(list((remote / "compile").iterdir())) == 4  # each worker's entry is in the remote
    assert "Ray compiles per node: " in proc.stdout and " 4 ok." in proc.stdout  # one node here
    assert (out / "manifest.json").read_bytes() == (plans_build / "manifest.json").read_bytes()
