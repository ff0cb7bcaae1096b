"""Fault injection: a small plans build SIGKILLed just before each of its file-system mutations
(tests/plugins/rbln_fault_inject.py counts os.replace/rename/link/symlink/mkdir/unlink/rmdir, os.open
and open for writing under the build directory). After every kill the build is run again, and then:

* no leftovers: no ``.tmp-*`` anywhere in the build directory, no inventory ``*.tmp``;
* the manifest is consistent: every artifact it names is linked at ``artifacts/<cell id>``, into
  the cache, to an entry that verifies with the manifest's content hash; no other cell is linked;
* the manifest is byte-identical to a clean build's.

The first scenario kills a fresh build; the second kills a rebuild that changes every artifact of
the same cells (the build dir holds a build from an edited recipe), where the manifest on disk and
the links it names must agree after the roll-forward that starts every run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rbln_build.store._store import Store, is_key

SMALL = ["matrix=plans", "model=qwen3_8b", "device=rebel100", "progress=false"]

pytestmark = pytest.mark.slow


def run(
    build: Path, env: dict[str, str], kill_at: int = 0, count: Path | None = None, extra: list[str] | None = None
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
            *SMALL,
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
