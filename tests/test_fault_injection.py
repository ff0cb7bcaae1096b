"""Fault injection: a small plans build SIGKILLed just before each of its file-system mutations
(tests/plugins/rbln_fault_inject.py counts os.replace/rename/link/symlink/mkdir/unlink/rmdir, os.open
and open for writing under the build directory). After every kill the build is run again, and then:

* no leftovers: no ``.tmp-*`` anywhere in the build directory, no inventory ``*.tmp``;
* the manifest is consistent: every artifact it names is linked at ``artifacts/<cell id>``, into
  the cache, to an entry that verifies with the manifest's content hash; no other cell is linked;
* the manifest is byte-identical to a clean build's.

The first scenario kills a fresh build; the second kills a rebuild that changes every artifact of
the same cells (the build dir holds a build from an edited recipe), where the manifest on disk and
the links it names must agree after the roll-forward that starts every run. Then (issue 20): a
``jobs=2`` build whose compile worker the OS kills, and a build killed while it uploads to a remote
cache, after which a second build dir must be served from that remote.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rbln_build.store._store import Store, is_key

SMALL = ["matrix=plans", "model=qwen3_8b", "device=rebel100", "progress=false"]

pytestmark = pytest.mark.slow


def run(
    build: Path,
    env: dict[str, str],
    kill_at: int = 0,
    count: Path | None = None,
    extra: list[str] | None = None,
    base: list[str] = SMALL,
) -> subprocess.CompletedProcess[str]:
    count = count or build.parent / "count.txt"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rbln_fault_inject",
            str(build),
            str(kill_at),
            str(count),
            *base,
            *(extra or []),
            f"build_dir={build}",
        ],
        cwd=build.parent,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, **env),
    )


def assert_consistent(build: Path) -> None:
    leftovers = [p for p in build.rglob("*") if p.name.startswith(".tmp-") or p.name.endswith(".tmp")]
    assert leftovers == [] and not (build / ".publishing").exists()
    cells = json.loads((build / "manifest.json").read_text())["cells"]
    store = Store(build / "cache", warn=lambda m: pytest.fail(f"warning while checking: {m}"))
    linked = set()
    for cid, entry in cells.items():
        link = build / "artifacts" / cid
        if entry["artifact"] is None:
            assert not link.is_symlink() and not link.exists()
            continue
        assert link.is_symlink()
        files = link.resolve()
        key = files.parent.name
        assert (
            files.name == "files" and files.parent.parent == (build / "cache" / "artifacts").resolve() and is_key(key)
        )
        found = store.lookup("artifacts", key, full=True)
        assert found is not None and found.content_hash == entry["artifact"]["content_hash"]
        linked.add(cid)
    assert {p.name for p in (build / "artifacts").iterdir()} == linked


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A shared, pre-filled inventory cache outside the build dirs (so a kill never costs an
    inventory computation), and no network."""
    return {"HF_HUB_OFFLINE": "1", "RBLN_BUILD_CACHE": str(tmp_path_factory.mktemp("inventory"))}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> tuple[Path, int]:
    """A clean build, and the number of mutations it makes."""
    build = tmp_path_factory.mktemp("clean") / "build"
    proc = run(build, env)
    assert proc.returncode == 0, proc.stderr
    assert_consistent(build)
    mutations = int((build.parent / "count.txt").read_text())
    assert mutations > 10
    return build, mutations


def test_killed_fresh_build_recovers_at_every_mutation(
    clean: tuple[Path, int], env: dict[str, str], tmp_path: Path
) -> None:
    reference, mutations = clean
    for kill_at in range(1, mutations + 1):
        work = tmp_path / f"k{kill_at}"
        work.mkdir()
        build = work / "build"
        killed = run(build, env, kill_at=kill_at)
        assert killed.returncode == -9, (kill_at, killed.stderr)
        again = run(build, env)
        assert again.returncode == 0, (kill_at, again.stderr)
        assert "Traceback" not in again.stderr
        assert_consistent(build)
        assert (build / "manifest.json").read_bytes() == (reference / "manifest.json").read_bytes(), kill_at
        shutil.rmtree(work)


def test_killed_rebuild_that_changes_every_artifact(
    clean: tuple[Path, int], env: dict[str, str], tmp_path: Path
) -> None:
    """The build dir holds a build of the same cells from an edited recipe (other compile key, so
    every artifact differs); the original is rebuilt into it and killed at each mutation. The
    manifest on disk must always agree with the links it names, once rolled forward."""
    from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR
    from rbln_build.pipeline._publish import recover

    reference, _ = clean
    recipes = tmp_path / "recipes"
    shutil.copytree(DEFAULT_RECIPES_DIR / "qwen3_8b", recipes / "qwen3_8b")
    config = recipes / "qwen3_8b" / "config.json"
    config.write_text(config.read_text().replace('"num_hidden_layers": 36', '"num_hidden_layers": 30'))
    seed = tmp_path / "seed" / "build"
    seed.parent.mkdir()
    assert run(seed, env, extra=[f"recipes_dir={recipes}"]).returncode == 0
    probe = tmp_path / "probe" / "build"
    shutil.copytree(seed, probe, symlinks=True)
    assert run(probe, env).returncode == 0  # the rebuild's own mutations, counted once
    mutations = int((probe.parent / "count.txt").read_text())
    assert mutations > 5
    for kill_at in range(1, mutations + 1):
        work = tmp_path / f"r{kill_at}"
        build = work / "build"
        shutil.copytree(seed, build, symlinks=True)
        killed = run(build, env, kill_at=kill_at)
        assert killed.returncode == -9, (kill_at, killed.stderr)
        recover(build, Store(build / "cache", warn=lambda m: None))  # what the next run does first
        assert_consistent_names(build)
        again = run(build, env)
        assert again.returncode == 0, (kill_at, again.stderr)
        assert_consistent(build)
        assert (build / "manifest.json").read_bytes() == (reference / "manifest.json").read_bytes(), kill_at
        shutil.rmtree(work)


def test_killed_parallel_build_recovers_at_every_mutation(env: dict[str, str], tmp_path: Path) -> None:
    """jobs=2 over two compile keys: the build process records each batch the workers send back as
    a pack, links its cells while the workers build (``_links.EarlyLinks``, from a thread of its
    own), then writes the manifest while it makes the remaining links. Killed before each of the
    build process's mutations (its workers' are not counted), the next run must end consistent,
    with the manifest of a build that was never killed."""
    base = ["matrix=plans", "device=rebel100", "progress=false", "jobs=2"]  # 2 compile keys, 4 cells
    main_only = dict(env, RBLN_FAULT_MAIN_ONLY="1")
    reference = tmp_path / "reference" / "build"
    reference.parent.mkdir()
    assert run(reference, main_only, base=base).returncode == 0
    assert_consistent(reference)
    mutations = int((reference.parent / "count.txt").read_text())
    assert mutations > 10
    for kill_at in range(1, mutations + 1):
        work = tmp_path / f"p{kill_at}"
        work.mkdir()
        build = work / "build"
        killed = run(build, main_only, kill_at=kill_at, base=base)
        assert killed.returncode == -9, (kill_at, killed.stderr)
        again = run(build, env, base=base)
        assert again.returncode == 0, (kill_at, again.stderr)
        assert "Traceback" not in again.stderr
        assert_consistent(build)
        assert (build / "manifest.json").read_bytes() == (reference / "manifest.json").read_bytes(), kill_at
        shutil.rmtree(work)


def assert_consistent_names(build: Path) -> None:
    """After a kill and the roll-forward: every artifact the manifest names is linked to an entry
    with the manifest's content hash (links of cells it does not name may remain)."""
    cells = json.loads((build / "manifest.json").read_text())["cells"]
    store = Store(build / "cache", warn=lambda m: None)
    for cid, entry in cells.items():
        if entry["artifact"] is None:
            continue
        link = build / "artifacts" / cid
        if not link.is_symlink():
            continue  # not linked yet: the manifest names an artifact the run had not linked
        found = store.lookup("artifacts", link.resolve().parent.name, full=True)
        assert found is not None and found.content_hash == entry["artifact"]["content_hash"], cid


# -- issue 20: a worker killed by the OS, and a remote upload killed midway ---------------------------

SLOW_BACKEND = "matrix.backend=rbln_test_plugins:SlowBackend"  # tests/plugins: lingers before committing


def rbln(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbln_build.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, **env),
    )


def killed_worker_build(args: list[str], env: dict[str, str], tmp_path: Path) -> tuple[Path, Path, str]:
    """A jobs=1 reference build, then a jobs=2 build whose worker that lingers first (the test
    backend writes its pid to the RBLN_TEST_SLEEP_ONCE_FILE) is SIGKILLed, as the OOM killer does.
    Checks that build exits 1 with no traceback; returns (reference, build, its stdout)."""
    reference = tmp_path / "reference"
    assert rbln([*args, "jobs=1", f"build_dir={reference}"], tmp_path, env).returncode == 0
    once = tmp_path / "once"
    build = tmp_path / "build"
    slow = dict(env, RBLN_TEST_BACKEND_SLEEP_S="300", RBLN_TEST_SLEEP_ONCE_FILE=str(once))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rbln_build.cli", *args, "jobs=2", f"build_dir={build}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, **slow),
    )
    deadline = time.time() + 600
    while not (once.exists() and once.read_text()) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert once.exists() and once.read_text(), "no worker lingered"
    os.kill(int(once.read_text()), signal.SIGKILL)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 1, err
    assert "Traceback" not in err and "internal error" not in err and "KeyboardInterrupt" not in err, err
    return reference, build, out


def test_jobs_2_with_a_worker_killed_mid_compile(env: dict[str, str], tmp_path: Path) -> None:
    """The OS kills one compile worker of a jobs=2 build: that key's cells fail as retryable
    (exit 1) and nothing else; no internal error and no worker's traceback on the terminal; the
    next run retries the key and gives a clean build's manifest."""
    args = ["matrix=plans", "progress=false", SLOW_BACKEND]
    reference, build, _ = killed_worker_build(args, env, tmp_path)  # the first compile to start lingers
    cells = json.loads((build / "manifest.json").read_text())["cells"]
    failed = {c for c, e in cells.items() if e["status"] == "failed"}
    assert failed and len({cells[c]["compile_key"] for c in failed}) == 1  # the killed key's cells alone
    assert all("the worker compiling this key died" in cells[c]["error"] for c in failed)
    assert all(e["status"] in ("ok", "expected_failure") for c, e in cells.items() if c not in failed)
    again = rbln([*args, "jobs=2", f"build_dir={build}"], tmp_path, env)
    assert again.returncode == 0, again.stderr
    assert (build / "manifest.json").read_bytes() == (reference / "manifest.json").read_bytes()
    assert not list(build.rglob(".tmp-*"))


def test_remote_upload_killed_midway_is_retried_and_serves_a_second_build_dir(
    clean: tuple[Path, int], env: dict[str, str], tmp_path: Path
) -> None:
    """A build uploading to a file:// remote is SIGKILLed at points spread over its remote writes
    (jobs=1: the uploads happen in the process that is killed). The next run of that build dir
    uploads what the remote lacks; a second build dir served from the remote then compiles nothing
    and publishes a clean build's manifest."""
    reference, _ = clean
    probe = tmp_path / "probe"
    probe.mkdir()
    remote_args = ["jobs=1"]
    counted = run_under(probe / "remote", probe / "build", env, 0, probe / "count.txt", remote_args)
    assert counted.returncode == 0, counted.stderr
    writes = int((probe / "count.txt").read_text())
    assert writes > 8
    for kill_at in sorted({1, writes // 4, writes // 2, (3 * writes) // 4, writes - 1}):
        work = tmp_path / f"u{kill_at}"
        work.mkdir()
        remote = work / "remote"
        killed = run_under(remote, work / "build", env, kill_at, work / "count.txt", remote_args)
        assert killed.returncode == -9, (kill_at, killed.stderr)
        again = run(work / "build", env, extra=[f"cache.remote=file://{remote}", *remote_args])
        assert again.returncode == 0 and "Traceback" not in again.stderr, (kill_at, again.stderr)
        second = work / "second"
        served = run(second, env, extra=[f"cache.remote=file://{remote}", *remote_args])
        assert served.returncode == 0, (kill_at, served.stderr)
        assert json.loads((second / "summary.json").read_text())["compiled"] == 0, (kill_at, served.stderr)
        assert "corrupt" not in served.stderr, (kill_at, served.stderr)
        assert (second / "manifest.json").read_bytes() == (reference / "manifest.json").read_bytes(), kill_at
        shutil.rmtree(work)


def run_under(
    root: Path, build: Path, env: dict[str, str], kill_at: int, count: Path, extra: list[str]
) -> subprocess.CompletedProcess[str]:
    """A build with ``cache.remote=file://ROOT``, killed before its KILL_AT-th write under ROOT."""
    build.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rbln_fault_inject",
            str(root),
            str(kill_at),
            str(count),
            *SMALL,
            *extra,
            f"cache.remote=file://{root}",
            f"build_dir={build}",
        ],
        cwd=build.parent,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, **env),
    )


def test_jobs_2_with_a_worker_killed_while_it_runs_a_batch_of_cells(env: dict[str, str], tmp_path: Path) -> None:
    """Cells go to the workers in batches (issue 24): the OS kills a worker in the middle of one.
    That batch's cells fail as retryable (exit 1), every other cell is built (the broken pool's other
    batches are resubmitted), nothing is half-written, and the next run gives a clean build's manifest."""
    args = ["matrix=plans", "progress=false", "matrix.backend=rbln_test_plugins:SlowFinalizeBackend"]
    reference, build, out = killed_worker_build(args, env, tmp_path)  # the first finalize lingers
    cells = json.loads((build / "manifest.json").read_text())["cells"]
    want = json.loads((reference / "manifest.json").read_text())["cells"]
    failed = {c for c, e in cells.items() if e["status"] == "failed"}
    assert failed and failed < set(cells), out  # the killed batch's cells, not all of them
    assert all("the worker building this cell died" in cells[c]["error"] for c in failed)
    assert all(cells[c] == want[c] for c in cells if c not in failed)  # the others, as a clean build
    # What the killed worker was writing is a .tmp-* folder (never a half entry), which the next
    # run's start-up removes: the other workers' temporaries were in use when it died.
    store = Store(build / "cache", warn=lambda m: pytest.fail(f"warning while checking: {m}"))
    for kind in ("compile", "artifacts"):
        for entry in (build / "cache" / kind).iterdir():
            assert entry.name.startswith(".tmp-") or store.lookup(kind, entry.name, full=True) is not None
    again = rbln([*args, "jobs=2", f"build_dir={build}"], tmp_path, env)
    assert again.returncode == 0, again.stderr
    assert (build / "manifest.json").read_bytes() == (reference / "manifest.json").read_bytes()
    assert not list(build.rglob(".tmp-*"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the pool's workers in /proc")
@pytest.mark.parametrize("kill", ["self-compile", "sibling-compile", "self-finalize", "sibling-finalize"])
def test_jobs_2_with_a_worker_killed_at_each_kind_of_point(env: dict[str, str], tmp_path: Path, kill: str) -> None:
    """Issue 36's probe: a worker killed at some points of a jobs=2 build ended it with exit 3 (the
    driver handed the next batch to the broken pool). A job SIGKILLs its own worker (after its compile's
    work, or in a cell's finalize) or the other worker (busy or idle) the moment it gets there: the
    build ends with exit 1 and the retry message when a job died with its worker, 0 when only an idle
    worker died (everything resubmitted), never 3 nor a traceback; the next run builds it all."""
    args = ["matrix=plans", "progress=false", "jobs=2", "matrix.backend=rbln_test_plugins:KillerBackend"]
    killing = dict(env, RBLN_TEST_KILL=kill, RBLN_TEST_KILL_ONCE_FILE=str(tmp_path / "once"))
    build = tmp_path / "build"
    proc = rbln([*args, f"build_dir={build}"], tmp_path, killing)
    assert (tmp_path / "once").exists(), "no job reached the kill point"
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    cells = json.loads((build / "manifest.json").read_text())["cells"]
    failed = [e["error"] for e in cells.values() if e["status"] == "failed"]
    if kill.startswith("self"):
        assert proc.returncode == 1 and failed, proc.stderr
    assert (proc.returncode == 1) == bool(failed)
    assert all("died" in why and "retr" in why for why in failed), failed
    again = rbln([*args, f"build_dir={build}"], tmp_path, env)
    assert again.returncode == 0, again.stderr
    assert all(
        e["status"] in ("ok", "expected_failure")
        for e in json.loads((build / "manifest.json").read_text())["cells"].values()
    )
