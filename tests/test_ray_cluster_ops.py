"""Operating executor=ray across machines (issue 36), on multi-node Ray clusters this test starts on
127.0.0.1 (`ray start --block` processes in their own process groups, stopped by killing those
groups, never `ray stop`):

* a cluster WITHOUT token authentication and a driver whose HOME holds a token file (as any earlier
  local ``ray.init()`` leaves): the build finishes (before: the stray file turned token mode on, the
  worker node could not call the driver back, ``OwnerDiedError``); ``RAY_AUTH_MODE=token`` against
  it is one line, exit 2, in seconds;
* the remote cache's key and secret (markers) given by ``cache.key_env``/``secret_env`` to a worker
  node that has no credentials: the build publishes to moto's S3 server and the markers are in 0
  files under both nodes' Ray folders, the build dir and the driver's output;
* Ctrl-C during a compile on the worker node leaves no ``rbln-build-ray-*`` in that node's TMPDIR;
* docs/scaling.md's token set-up block, run line by line.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli import PLANS, check_ok, rbln, summary
from test_ray_isolated import _free_port, _full, _spawn, _stop, _wait_for
from test_remote import s3  # noqa: F401 (a fixture: moto's S3 server on 127.0.0.1)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (the ray extra)"),
]
ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ROOT / "tests" / "plugins"
# several nodes on one machine (Ray refuses a second node when this is 0), no usage statistics
NODE_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1", "RAY_USAGE_STATS_ENABLED": "0"}
RAY = [sys.executable, "-m", "ray.scripts.scripts"]
KEY, SECRET = "MARKERKEYq7Zx41", "MARKERSECRETw9Vb83kd"


def _home(path: Path, token: bool) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if token:  # a token file in ~/.ray, as any earlier local ray.init() leaves
        subprocess.run([*RAY, "get-auth-token", "--generate"], env=_full({**NODE_ENV, "HOME": str(path)}), check=True,
                       capture_output=True, timeout=120)  # fmt: skip
    return path


@pytest.fixture(scope="module")
def open_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path | str]]:
    """A head (0 CPUs) and a worker node (1 CPU), no token authentication, each with its own
    --temp-dir; the worker's TMPDIR is a folder of the test, its environment has no credentials and
    the test backend's switches (SlowBackend lingers on the compile that claims the once-file)."""
    base = tmp_path_factory.mktemp("open-cluster")
    home, worker_tmp = _home(base / "node-home", token=False), base / "worker-tmp"
    worker_tmp.mkdir()
    port = _free_port()
    temps = {"head": Path(f"/tmp/rbo-h-{os.getpid()}-{port}"), "worker": Path(f"/tmp/rbo-w-{os.getpid()}-{port}")}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RAY_AUTH"))}
    env.update(NODE_ENV, HOME=str(home), PYTHONPATH=os.pathsep.join([str(PLUGINS), env.get("PYTHONPATH", "")]))
    common = ["start", "--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1"]
    head = _spawn([*RAY, *common, "--head", f"--port={port}", "--include-dashboard=false", "--num-cpus=0",
                   f"--temp-dir={temps['head']}"], env, base / "head.log")  # fmt: skip
    worker = None
    try:
        _wait_for(base / "head.log", head, "ray start --head")
        worker_env = dict(env, TMPDIR=str(worker_tmp), RBLN_TEST_BACKEND_SLEEP_S="300",
                          RBLN_TEST_SLEEP_ONCE_FILE=str(base / "once"))  # fmt: skip
        worker = _spawn([*RAY, *common, f"--address=127.0.0.1:{port}", "--num-cpus=1", f"--temp-dir={temps['worker']}"],
                        worker_env, base / "worker.log")  # fmt: skip
        _wait_for(base / "worker.log", worker, "the worker node")
        yield {"address": f"127.0.0.1:{port}", "base": base, "worker_tmp": worker_tmp, **temps}
    finally:
        if worker is not None:
            _stop(worker)
        _stop(head)
        import shutil

        for t in temps.values():
            shutil.rmtree(t, ignore_errors=True)


@pytest.fixture(scope="module")
def checkpoint_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose recipe comes from a local checkpoint: its weights travel to the worker through
    Ray's object store, owned by the driver (the path that broke when the modes disagreed)."""
    from _checkpoints import make_checkpoint

    base = tmp_path_factory.mktemp("ckproj")
    root = base / "proj"
    check_ok(rbln(["init", str(root)], cwd=base))
    make_checkpoint(base / "ck", "llama", seed=7)
    check_ok(rbln(["recipe", "add", "ck", "--from", str(base / "ck"), "--max-seq-len", "256"], cwd=root))
    (root / "conf" / "matrix" / "main.yaml").write_text("models: [ck]\ndevices: [rebel100]\nbudgets: [null]\n")
    return root


def test_a_stray_token_file_does_not_turn_token_mode_on_against_a_cluster_without_auth(
    open_cluster: dict[str, Path | str], checkpoint_project: Path, tmp_path: Path
) -> None:
    driver_home = _home(tmp_path / "driver-home", token=True)
    args = ["progress=false", "executor=ray", f"executor.address={open_cluster['address']}"]
    env = {"HOME": str(driver_home), "RAY_USAGE_STATS_ENABLED": "0"}
    proc = rbln([*args, "build_dir=build-open"], cwd=checkpoint_project, env=env, timeout=600)
    check_ok(proc)
    assert summary(checkpoint_project / "build-open")["compiled"] == 1 and "OwnerDiedError" not in proc.stdout
    assert proc.stderr.count(": program (worker ") == 1

    started = time.monotonic()
    proc = rbln([*args, "build_dir=build-asked"], cwd=checkpoint_project, env={**env, "RAY_AUTH_MODE": "token"})
    took = time.monotonic() - started
    check_ok(proc, 2)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("rbln-build: ")]
    assert errors == [
        f"rbln-build: executor.address: the Ray cluster at '{open_cluster['address']}' does not use token "
        "authentication, but this driver is set to (RAY_AUTH_MODE=token); unset it, or start the cluster with "
        "token authentication (docs/scaling.md)."
    ]
    assert took < 30, f"the mismatch took {took:.1f} s to report"

    proc = rbln([*args, "executor.address=127.0.0.1:1", "build_dir=build-nowhere"], cwd=checkpoint_project, env=env)
    check_ok(proc, 2)
    assert "executor.address: the Ray cluster at '127.0.0.1:1' cannot be reached (" in proc.stderr


def test_cache_credentials_reach_a_worker_node_and_are_written_nowhere(
    open_cluster: dict[str, Path | str],
    tmp_path: Path,
    s3: tuple[dict[str, str], object, object],  # noqa: F811
) -> None:
    server_env, fs, _ = s3
    out = tmp_path / "build"
    env = {
        "HOME": str(_home(tmp_path / "driver-home", token=False)),
        "CI_S3_KEY": KEY,
        "CI_S3_SECRET": SECRET,
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    proc = rbln(
        [*PLANS, "executor=ray", f"executor.address={open_cluster['address']}", f"build_dir={out}",
         "cache.remote=s3://rbln-cache/secret-test", f"cache.endpoint={server_env['AWS_ENDPOINT_URL']}",
         "cache.key_env=CI_S3_KEY", "cache.secret_env=CI_S3_SECRET", "cache.require_remote=true"],
        cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip
    check_ok(proc)
    assert summary(out)["compiled"] == 4 and proc.stderr.count(": plan (worker ") == 4
    assert len(fs.ls("rbln-cache/secret-test/compile")) == 4  # type: ignore[attr-defined]  # the workers published
    folders = [Path(str(open_cluster["head"])), Path(str(open_cluster["worker"])), out, Path(str(open_cluster["base"]))]
    files = [p for folder in folders for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    for node in ("head", "worker"):  # every node's session logs are among the files read
        assert [p for p in files if p.suffix in (".log", ".out", ".err") and str(open_cluster[node]) in str(p)]
    hits = [str(p) for p in files for marker in (KEY, SECRET) if marker.encode() in p.read_bytes()]
    assert hits == [], f"credentials written to: {hits}"
    assert KEY not in proc.stdout + proc.stderr and SECRET not in proc.stdout + proc.stderr


class HeldAtExit(AssertionError):
    """The driver was held after Ctrl-C until ``_interrupts.bound_exit`` ended it (exit 1, stacks on stderr)."""


@pytest.mark.xfail(
    reason="intermittent, not reproduced: in one whole slow-suite run (after the credentials test on the same "
    "cluster) the driver had not exited 120 s after SIGINT; alone, and 8 times in a row under a 2-core CPU load, "
    "it exits 130 in 5-7 s. Two candidate holds are removed (Ray's callback thread no longer lands results or "
    "takes the scheduler's future locks), and the exit is bounded: a recurrence is exit 1 with every thread's "
    "stack in the failure message (HeldAtExit), which says where it was held.",
    raises=HeldAtExit,
    strict=False,
)
def test_ctrl_c_during_a_worker_nodes_compile_leaves_no_scratch_folder(
    open_cluster: dict[str, Path | str], tmp_path: Path
) -> None:
    once = Path(str(open_cluster["base"])) / "once"
    once.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "rbln_build.cli", *PLANS, "matrix.backend=rbln_test_plugins:SlowBackend",
            "executor=ray", f"executor.address={open_cluster['address']}", f"build_dir={tmp_path / 'b'}"]  # fmt: skip
    env = _full({"HOME": str(_home(tmp_path / "h", token=False)), "HF_HUB_OFFLINE": "1",
                 "PYTHONPATH": os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")])})  # fmt: skip
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    scratch = Path(str(open_cluster["worker_tmp"]))
    while not (once.exists() and once.read_text()) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert once.exists(), "the compile never started"
    assert list(scratch.glob("rbln-build-ray-*")), "the compile's scratch folder is not in the node's TMPDIR"
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    try:
        _out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        stacks = _stacks(proc.pid)  # where the driver waits, before it is killed
        proc.kill()  # a driver that did not stop must not outlive the test (nor leak its pipes)
        _out, err = proc.communicate()
        pytest.fail(f"the driver had not exited 120 s after SIGINT; its threads:\n{stacks}\nits stderr:\n{err[-3000:]}")
    print(f"the driver exited {time.monotonic() - sent:.1f} s after SIGINT")
    if proc.returncode == 1 and "Timeout (" in err:  # the bound ended it: where it was held, for the record
        raise HeldAtExit(f"the driver was held after SIGINT until the exit bound; its threads:\n{err[-20000:]}")
    assert proc.returncode == 130, err[-2000:]
    time.sleep(1)
    assert list(scratch.glob("rbln-build-ray-*")) == []


def _stacks(pid: int) -> str:
    """Every thread's stack of process ``pid`` (Python and native frames, by py-spy when installed)."""
    import shutil

    spy = shutil.which("py-spy")
    if spy is None:
        return "(py-spy is not installed: pip install py-spy to see where the driver waits)"
    done = subprocess.run([spy, "dump", "--native", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr


# -- docs/scaling.md's token set-up, line by line ---------------------------------------------------


def _token_block() -> list[tuple[str, str]]:
    """(role, command) for each command of the block: head, worker or driver, from its comments."""
    text = (ROOT / "docs" / "scaling.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "ray get-auth-token --generate" in b)
    lines, pending, role = [], "", "head"
    for raw in block.splitlines():
        if raw.strip().startswith("#"):
            role = "head" if "head node" in raw else "worker" if "each host" in raw else "driver"
            continue
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        line = re.split(r"\s{2,}#|\s+#\s", line)[0].strip()
        if line:
            lines.append((role, line))
    return lines


def test_the_documented_token_setup_works_as_written(tmp_path: Path) -> None:
    lines = _token_block()
    port, nodes = _free_port(), []
    homes = {role: _home(tmp_path / f"{role}-home", token=False) for role in ("head", "worker")}
    driver_home = _home(tmp_path / "driver-home", token=True)  # another cluster's token: must not be used
    envs: dict[str, dict[str, str]] = {"head": {}, "worker": {}, "driver": {}}
    token = ""
    subst = {"HEAD": "127.0.0.1", "WORKER": "127.0.0.1", "6379": str(port)}

    def fill(line: str) -> str:
        for k, v in subst.items():
            line = line.replace(f"={k}", f"={v}").replace(f"{k}:", f"{v}:").replace(f":{k}", f":{v}")
        return line.replace("THE_TOKEN", token)

    try:
        for role, line in lines:
            line = fill(line)
            argv = shlex.split(line)
            if argv[0] == "export":
                envs[role].update(tuple(a.split("=", 1)) for a in argv[1:])  # type: ignore[misc]
                continue
            if argv[0] == "rbln-build":
                assert role == "driver" and (role, line) == (lines[-1][0], fill(lines[-1][1]))
                continue
            assert argv[0] == "ray" and role in ("head", "worker"), line
            env = _full({**NODE_ENV, **envs[role], "HOME": str(homes[role])})
            if argv[1] == "start":
                log = tmp_path / f"{role}.log"
                extra = ["--block", "--disable-usage-stats", f"--temp-dir=/tmp/rbd-{role[0]}-{port}",
                         "--num-cpus=" + ("0" if role == "head" else "1")]  # fmt: skip
                nodes.append(_spawn([*RAY, *argv[1:], *extra], env, log))
                _wait_for(log, nodes[-1], line)
            else:
                done = subprocess.run([*RAY, *argv[1:]], env=env, capture_output=True, text=True, timeout=120)
                assert done.returncode == 0, done.stderr
                if argv[1:] == ["get-auth-token"]:
                    token = done.stdout.strip()
        assert token and (homes["head"] / ".ray" / "auth_token").read_text().strip() == token
        # (the address a node advertises is not checked: Ray replaces a loopback --node-ip-address by
        # the host's own address, services.resolve_ip_for_localhost)
        assert not (homes["worker"] / ".ray").exists()  # the worker joined with RAY_AUTH_TOKEN alone
        driver = shlex.split(fill(lines[-1][1]))
        kept = [a for a in driver[1:] if a.startswith(("executor.", "executor="))]
        assert kept == ["executor=ray", f"executor.address=127.0.0.1:{port}", "executor.auth_token_env=CLUSTER_TOKEN"]
        denv = {**envs["driver"], "HOME": str(driver_home), "RAY_USAGE_STATS_ENABLED": "0"}
        out = tmp_path / "build"
        proc = rbln([*PLANS, *kept, f"build_dir={out}"], cwd=tmp_path, env=denv, timeout=600)
        check_ok(proc)
        assert summary(out)["compiled"] == 4 and proc.stderr.count(": plan (worker ") == 4
        # the cluster does want the token: without it (and with the stray file only), one line, exit 2
        proc = rbln([*PLANS, *kept[:2], f"build_dir={tmp_path / 'no'}"], cwd=tmp_path,
                    env={"HOME": str(driver_home), "RAY_USAGE_STATS_ENABLED": "0"})  # fmt: skip
        check_ok(proc, 2)
        assert "refuses the token from " in proc.stderr and "auth_token: it is not that cluster's token" in proc.stderr
    finally:
        for node in reversed(nodes):
            _stop(node)
        import shutil

        for r in ("h", "w"):
            shutil.rmtree(f"/tmp/rbd-{r}-{port}", ignore_errors=True)
