"""executor=ray on real local Ray clusters: ``ray.init`` on this machine (started by the build) and a
two-node ``ray.cluster_utils.Cluster`` whose second node alone has the ``rbln_sdk`` resource. A
worker killed mid-compile is retried by Ray and the manifest equals a local build's; a compile whose
retries are used up fails its cells alone. Everything talks to 127.0.0.1 only (checked on every
process of the test). Without Ray, executor=ray is a configuration error naming the extra."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_cli import PLANS, check_ok, manifest, plans_build, rbln, summary  # noqa: F401 (a fixture)

SLOW = "matrix.backend=rbln_test_plugins:SlowBackend"
# Read by Ray when it is imported (ray_constants), so set before any test imports it: every node and
# the GCS on 127.0.0.1, no usage statistics. The subprocesses (builds, Ray nodes) inherit them.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
os.environ.update(LOOPBACK_ENV)
pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::PendingDeprecationWarning", "ignore::ResourceWarning", "ignore::UserWarning"
)


def test_executor_ray_without_ray_is_a_configuration_error_naming_the_extra(tmp_path: Path) -> None:
    block = (
        "import sys\n"
        "class NoRay:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'ray' or name.startswith('ray.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, NoRay())\n"
        "from rbln_build.cli import main\n"
        "sys.argv[1:] = sys.argv[1:]\n"
        "main()\n"
    )
    script = tmp_path / "noray.py"
    script.write_text(block)
    proc = subprocess.run(
        [sys.executable, str(script), *PLANS, "executor=ray", f"build_dir={tmp_path / 'b'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    check_ok(proc, 2)
    assert "executor=ray: Ray is not installed; install it with: pip install 'rbln-build[ray]'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.fixture
def ray_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {**LOOPBACK_ENV, "RAY_TMPDIR": str(tmp_path_factory.mktemp("ray"))}  # no stale cluster address
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # no cluster address from the environment
    pytest.importorskip(
        "ray", reason="ray is not installed: executor=ray needs the ray extra (pip install 'rbln-build[ray]')"
    )
    return env


def loopback_only() -> list[str]:
    """Connections of this process and all its descendants (the build, the Ray nodes and workers)
    whose remote end is not on the loopback."""
    import psutil

    bad = []
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            conns = proc.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for c in conns:
            if c.raddr and not (c.raddr.ip.startswith("127.") or c.raddr.ip in ("::1", "::ffff:127.0.0.1")):
                bad.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}: {c.laddr} -> {c.raddr}")
    return bad


@pytest.mark.slow
def test_ray_local_cluster_builds_the_manifest_of_a_local_build(
    plans_build: Path,  # noqa: F811
    tmp_path: Path,
    ray_env: dict[str, str],
) -> None:
    out, home = tmp_path / "build", tmp_path / "home"
    home.mkdir()  # Ray 2.60's ray.init() of a local cluster writes ~/.ray/auth_token when it finds no token
    env = {**ray_env, "HOME": str(home)}
    proc = rbln([*PLANS, "executor=ray", "executor.address=local", f"build_dir={out}"], cwd=tmp_path, env=env)
    check_ok(proc)
    assert list(home.iterdir()) == []  # the private cluster's token lived in the build's environment only
    assert proc.stderr.count(": plan (") == 4  # each compile on a Ray worker (host:pid)
    assert summary(out)["compiled"] == 4
    assert (out / "manifest.json").read_bytes() == (plans_build / "manifest.json").read_bytes()


@pytest.fixture
def two_nodes(ray_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    # Ray workers get the environment of the process that started the nodes (this one), not the
    # build's: the test backend's switches are set here. Its first compile lingers until killed.
    monkeypatch.setenv("RBLN_TEST_BACKEND_SLEEP_S", "300")
    monkeypatch.setenv("RBLN_TEST_SLEEP_ONCE_FILE", str(tmp_path / "once"))

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1, resources={"rbln_sdk": 1})  # the one "SDK host"
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        cluster.shutdown()


def _kill_mid_compile(
    tmp_path: Path, cluster: Any, name: str, *extra: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """A build on the cluster whose first compile lingers; its worker is SIGKILLed mid-compile."""
    once = tmp_path / "once"
    once.unlink(missing_ok=True)  # the next compile to start lingers (and writes its pid there)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    args = [
        sys.executable,
        "-m",
        "rbln_build.cli",
        *PLANS,
        SLOW,
        "executor=ray",
        f"executor.address={cluster.address}",
        "+executor.resources.rbln_sdk=1",
        f"build_dir={tmp_path / name}",
        *extra,
    ]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (once.exists() and once.read_text()) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert once.exists(), "the compile never started"
    bad = loopback_only()  # sampled while the build, both nodes and a worker are busy
    os.kill(int(once.read_text()), signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(args, proc.returncode, out, err), bad


@pytest.mark.slow
def test_two_node_cluster_retries_a_killed_worker_and_fails_a_key_only_when_retries_run_out(
    tmp_path: Path, two_nodes: Any
) -> None:
    reference = tmp_path / "reference"
    check_ok(
        rbln([*PLANS, SLOW, "jobs=1", f"build_dir={reference}"], cwd=tmp_path, env={"RBLN_TEST_BACKEND_SLEEP_S": "0"})
    )
    proc, bad = _kill_mid_compile(tmp_path, two_nodes, "retried")
    check_ok(proc)
    assert bad == []
    assert proc.stderr.count(": plan (") == 4  # each compile on a Ray worker (host:pid)
    assert proc.stderr.count(", after 1 retry)") == 1  # the killed compile, run again by Ray, says so
    assert "(1 after a retry)" in proc.stdout  # and the per-node summary counts it
    assert (tmp_path / "retried" / "manifest.json").read_bytes() == (reference / "manifest.json").read_bytes()
    assert not list((tmp_path / "retried").rglob(".tmp-*"))

    proc, bad = _kill_mid_compile(tmp_path, two_nodes, "given-up", "executor.max_retries=0")
    check_ok(proc, 1)
    assert bad == []
    cells = manifest(tmp_path / "given-up")["cells"]
    failed = {c for c, e in cells.items() if e["status"] == "failed"}
    assert failed and len(failed) < len(cells)
    assert {cells[c]["error_kind"] for c in failed} == {"build_failed"}
    assert all("the worker compiling this key died" in cells[c]["error"] for c in failed)
    assert len({cells[c]["compile_key"] for c in failed}) == 1  # the killed key's cells alone
    ok = {c for c, e in cells.items() if e["status"] in ("ok", "expected_failure")}
    assert ok == set(cells) - failed


def test_a_private_cluster_token_is_set_in_the_environment_and_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_cluster.private_token``: a fresh 256-bit token in RAY_AUTH_TOKEN with token mode (so Ray's
    ``ray.init()`` finds one and writes none to HOME), restored after; the user's own setting wins."""
    from rbln_build.execution._cluster import private_token, restore

    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    saved = private_token()
    token = os.environ["RAY_AUTH_TOKEN"]
    assert os.environ["RAY_AUTH_MODE"] == "token" and len(token) == 64 and int(token, 16) >= 0
    restore(saved)
    assert "RAY_AUTH_MODE" not in os.environ and "RAY_AUTH_TOKEN" not in os.environ
    assert private_token() != {} and os.environ["RAY_AUTH_TOKEN"] != token  # a fresh one each time
    restore(saved)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the user's choice: left as it is
    assert private_token() == {} and "RAY_AUTH_TOKEN" not in os.environ
