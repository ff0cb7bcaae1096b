"""A Ray worker node that cannot see the driver's project or checkpoint (issue 21): all on 127.0.0.1,
token authentication on. The head node (``ray start --head``, 0 CPUs: it runs no task) and a worker
node (2 CPUs) started in its own mount namespace (``unshare -m``) where empty tmpfs mounts hide the
project folder (its recipes, its plug-in backend, the build folders) and the checkpoint folder. The
driver builds a project recipe made by ``rbln-build recipe add`` from a local checkpoint, plus the
project's seeded recipe, with a plug-in backend that lives only in the project, on that cluster
with a file:// remote cache: the manifest equals a local jobs=1 build's byte for byte, the worker's
entries are in the remote, and the checkpoint's weights went there once, by their sha256. Built
again without a remote (the weights and the entries then travel through Ray's object store), the
manifest is the same."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli import check_ok, rbln, summary

# Ray is not imported in this process (test_ray.py's in-process clusters read their loopback setting
# when Ray is first imported): only the CLI and `ray start` subprocesses use it.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (the ray extra)"),
]

MATRIX = "models: [ck, my_llama]\ndevices: [rebel100]\nbudgets: [null]\n"
# Ray refuses a second node when the head's environment holds 0 here (test_ray.py's loopback setting)
MULTI_NODE = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
PLUGIN = '''"""A project's own backend: the torch export under another name (the workers do not have this file)."""
from rbln_build.backends.torch._export import TorchExportBackend


class ProjectBackend(TorchExportBackend):
    name = "project"
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(home: Path, **more: str) -> dict[str, str]:
    """On top of os.environ for a process of this test: its own HOME (where Ray keeps the token)."""
    return {"RAY_USAGE_STATS_ENABLED": "0", "HOME": str(home), **more}


def _full(env: dict[str, str]) -> dict[str, str]:
    return dict(os.environ, **env)


def _unshare_problem() -> str | None:
    if shutil.which("unshare") is None:
        return "no `unshare` command here (util-linux)"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs none /mnt"], capture_output=True, text=True, timeout=60
    )
    if probe.returncode != 0:
        return f"`unshare -m` + tmpfs mount not permitted here: {probe.stderr.strip()[:200]}"
    return None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(30)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for(log: Path, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        if "will now block forever" in log.read_text(errors="replace"):
            return
        time.sleep(0.5)
    pytest.fail(f"{what} did not come up:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A project with a recipe from a local checkpoint outside it, a plug-in backend inside it, and
    the local jobs=1 build the cluster's build is compared with."""
    from _checkpoints import make_checkpoint

    base = tmp_path_factory.mktemp("isolated")
    root = base / "proj"
    check_ok(rbln(["init", str(root)], cwd=base))
    make_checkpoint(base / "ck", "llama", seed=7)
    check_ok(rbln(["recipe", "add", "ck", "--from", str(base / "ck"), "--max-seq-len", "256"], cwd=root))
    (root / "conf" / "matrix" / "main.yaml").write_text(MATRIX)
    (root / "plugins").mkdir()
    (root / "plugins" / "project_backend.py").write_text(PLUGIN)
    env = {"PYTHONPATH": os.pathsep.join([str(root / "plugins"), os.environ.get("PYTHONPATH", "")])}
    local = rbln(["progress=false", "jobs=1", "matrix.backend=project_backend:ProjectBackend"], cwd=root, env=env)
    check_ok(local)
    return {"base": base, "root": root, "checkpoint": base / "ck", "local": root / "build"}


@pytest.fixture
def cluster(project: dict[str, Path]) -> Iterator[dict[str, object]]:
    problem = _unshare_problem()
    if problem is not None:
        pytest.skip(f"the worker node needs its own mount namespace: {problem}")
    base = project["base"]
    home = base / "home"
    home.mkdir(exist_ok=True)
    subprocess.run(  # a token in ~/.ray: `ray start --head` then turns token authentication on
        [sys.executable, "-m", "ray.scripts.scripts", "get-auth-token", "--generate"],
        env=_full(_env(home)),
        check=True,
        capture_output=True,
        timeout=120,
    )
    port = _free_port()
    temp = Path(f"/tmp/rbi-{os.getpid()}-{port}")
    ray = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", "--disable-usage-stats"]
    head_log, worker_log, seen = base / "head.log", base / "worker.log", base / "worker-sees.txt"
    head = _spawn(
        [*ray, "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--include-dashboard=false"]
        + ["--num-cpus=0", f"--temp-dir={temp}"],
        _full(_env(home, **MULTI_NODE)),
        head_log,
    )
    worker = None
    try:
        _wait_for(head_log, head, "ray start --head")
        hidden = [project["root"], project["checkpoint"]]
        script = " && ".join(
            [*(f"mount -t tmpfs none {d}" for d in hidden), f"ls -A {' '.join(map(str, hidden))} > {seen}"]
            + ["exec " + " ".join([*ray, f"--address=127.0.0.1:{port}", "--node-ip-address=127.0.0.1", "--num-cpus=2"])]
        )
        # the worker node joins with the token too
        worker = _spawn(
            ["unshare", "-m", "sh", "-c", script], _full(_env(home, RAY_AUTH_MODE="token", **MULTI_NODE)), worker_log
        )
        _wait_for(worker_log, worker, "the worker node (ray start --address)")
        yield {"address": f"127.0.0.1:{port}", "home": home, "seen": seen}
    finally:
        if worker is not None:
            _stop(worker)
        _stop(head)
        shutil.rmtree(temp, ignore_errors=True)


def test_a_worker_node_that_cannot_see_the_project_or_checkpoint_builds_the_local_builds_manifest(
    project: dict[str, Path], cluster: dict[str, object]
) -> None:
    root, base = project["root"], project["base"]
    listing = Path(str(cluster["seen"])).read_text().split()
    assert sorted(listing) == sorted([f"{project['root']}:", f"{project['checkpoint']}:"])  # both empty there
    remote = base / "remote"
    env = {"PYTHONPATH": os.pathsep.join([str(root / "plugins"), os.environ.get("PYTHONPATH", "")])}
    args = [
        "progress=false",
        "matrix.backend=project_backend:ProjectBackend",
        "executor=ray",
        f"executor.address={cluster['address']}",
        f"cache.remote=file://{remote}",
    ]
    env = {**_env(Path(str(cluster["home"]))), **env}  # the driver finds the token in ~/.ray/auth_token
    proc = rbln([*args, "build_dir=build-ray"], cwd=root, env=env, timeout=900)
    check_ok(proc)
    out = root / "build-ray"
    assert summary(out)["compiled"] == 2 and proc.stderr.count(": program (worker ") == 2
    assert "Ray compiles per node: " in proc.stdout and " 2 ok." in proc.stdout
    assert (out / "manifest.json").read_bytes() == (project["local"] / "manifest.json").read_bytes()
    cells = json.loads((out / "manifest.json").read_text())["cells"]
    keys = {c["compile_key"] for c in cells.values()}
    assert len(keys) == 2 and keys == {p.name for p in (remote / "compile").iterdir()}  # the worker's entries
    weights = (project["checkpoint"] / "model.safetensors").read_bytes()
    assert [p.name for p in (remote / "inputs").iterdir()] == [hashlib.sha256(weights).hexdigest()]

    # No remote cache: the weights go through Ray's object store, the entries come back the same way
    proc = rbln([*args[:-1], "build_dir=build-no-remote"], cwd=root, env=env, timeout=900)
    check_ok(proc)
    out = root / "build-no-remote"
    assert summary(out)["compiled"] == 2 and proc.stderr.count(": program (worker ") == 2
    assert (out / "manifest.json").read_bytes() == (project["local"] / "manifest.json").read_bytes()
