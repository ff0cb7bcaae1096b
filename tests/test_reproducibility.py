"""Reproducibility under variation (docs/reproducibility.md): the default matrix built twice, from
scratch, with everything reprotest-style varied that can be varied on one machine: the build's folder
(and the path it is reached by), HOME (so the inventory cache too), TMPDIR, TZ, LANG/LC_ALL, umask,
PYTHONHASHSEED, the hostname (a UTS namespace, as root), jobs=1 vs jobs=2; and a third build with
``executor=ray`` (a private Ray cluster on 127.0.0.1 that the build starts, its workers in the
build's environment) against the first. The manifests, every artifact file and the releases of the
builds are byte-identical."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli import check_ok

pytestmark = [pytest.mark.slow, pytest.mark.integration]

VARIANTS = {
    "a": {
        "path": ("a",),
        "env": {"TZ": "UTC", "LANG": "C", "LC_ALL": "C", "PYTHONHASHSEED": "0"},
        "umask": 0o022,
        "jobs": "1",
        "hostname": None,
    },
    "b": {
        "path": ("b", "a much", "longer", "path with spaces"),
        "env": {"TZ": "America/St_Johns", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "4242"},
        "umask": 0o077,
        "jobs": "2",
        "hostname": "rbln-reprotest",
    },
    "ray": {  # the executor, and the folder (a Ray build's artifacts are the same files as a local one's)
        "path": ("ray", "build here"),
        "env": {"TZ": "UTC", "LANG": "C", "LC_ALL": "C", "PYTHONHASHSEED": "0"},
        "umask": 0o022,
        "jobs": "2",
        "hostname": None,
        "overrides": ["executor=ray", "executor.address=local"],
    },
}
# Read by Ray when it is imported (as in tests/test_ray.py): every node on 127.0.0.1, no usage statistics
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--uts", "true"], capture_output=True)
    return probe.returncode == 0


def _build(root: Path, name: str) -> Path:
    v = VARIANTS[name]
    work = root.joinpath(*v["path"])  # type: ignore[arg-type]
    home, tmp = root / f"home-{name}", root / f"tmp-{name}"
    for folder in (work, home, tmp):
        folder.mkdir(parents=True)
    drop = ("RBLN_BUILD_CACHE", "RBLN_BUILD_PROJECT", "RAY_ADDRESS", "RAY_TMPDIR")  # no cluster from outside
    env = {k: val for k, val in os.environ.items() if k not in drop}
    env.update(v["env"], HOME=str(home), TMPDIR=str(tmp), HF_HUB_OFFLINE="1", **RAY_ENV)  # type: ignore[arg-type]
    command = [sys.executable, "-m", "rbln_build.cli", "progress=false", f"jobs={v['jobs']}", *v.get("overrides", [])]
    if v["hostname"] is not None and _can_unshare():
        command = ["unshare", "--uts", "sh", "-c", f'hostname {v["hostname"]} && exec "$@"', "sh", *command]
    umask = v["umask"]
    proc = subprocess.run(
        command,
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=lambda: os.umask(umask),  # type: ignore[arg-type]
    )
    check_ok(proc)
    if "executor=ray" in v.get("overrides", []):  # each compile ran on a Ray worker, not in a local one
        # the driver's count of compiles by the node each Ray task reported (commands/_build.py, _per_node);
        # not Ray's session folder, which a long TMPDIR moves to a short folder of the build's (_ray_setup)
        per_node = [line for line in proc.stdout.splitlines() if line.startswith("Ray compiles per node: ")]
        assert per_node and "lost worker" not in per_node[0], f"no Ray worker ran:\n{proc.stdout[-3000:]}"
        assert sum(int(n) for n in re.findall(r"(\d+) ok", per_node[0])) == 8, per_node
    release = [sys.executable, "-m", "rbln_build.cli", "release", "r1", "--to", str(root / f"releases-{name}")]
    check_ok(subprocess.run(release, cwd=work, env=env, capture_output=True, text=True, timeout=300))
    return work / "build"


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path, links followed (artifacts/ links into cache/)."""
    out = {}
    for folder, _, names in os.walk(root, followlinks=True):
        for name in names:
            path = Path(folder) / name
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return dict(sorted(out.items()))


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Path]]]:
    """The variants' build directories, each built once when a test first asks for it."""
    root = tmp_path_factory.mktemp("variation")
    done: dict[str, Path] = {}
    yield root, done


def _built(builds: tuple[Path, dict[str, Path]], name: str) -> Path:
    root, done = builds
    if name not in done:
        done[name] = _build(root, name)
    return done[name]


def _same_builds(root: Path, a: Path, b: Path, names: tuple[str, str]) -> None:
    assert (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()
    assert (a / "results.txt").read_bytes() == (b / "results.txt").read_bytes()
    artifacts_a, artifacts_b = _tree(a / "artifacts"), _tree(b / "artifacts")
    assert len(artifacts_a) > 18 and sorted(artifacts_a) == sorted(artifacts_b)
    different = [name for name in artifacts_a if artifacts_a[name] != artifacts_b[name]]
    assert different == [], f"artifact files that differ between the two builds: {different}"
    release_a, release_b = (_tree(root / f"releases-{n}" / "r1") for n in names)
    assert release_a == release_b  # release.json (provenance included), every file, every model card


def test_the_default_matrix_is_byte_identical_under_variation(builds: tuple[Path, dict[str, Path]]) -> None:
    _same_builds(builds[0], _built(builds, "a"), _built(builds, "b"), ("a", "b"))


def test_a_ray_build_is_byte_identical_to_a_local_one(builds: tuple[Path, dict[str, Path]]) -> None:
    pytest.importorskip(
        "ray", reason="ray is not installed: executor=ray needs the ray extra (pip install 'rbln-build[ray]')"
    )
    _same_builds(builds[0], _built(builds, "a"), _built(builds, "ray"), ("a", "ray"))
