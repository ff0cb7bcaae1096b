"""Inside the build dir nothing is followed out; a cache shared by build dirs is ``cache.dir=``.

* a ``cache``, a cache kind, ``logs``, ``hydra`` or doit's state file that resolves
  outside ``build_dir`` is refused (exit 2, one line naming it and what to do), and nothing there is
  touched: no ``.tmp-*`` folder emptied, no key-named entry removed, no file written;
* ``cache.dir=PATH`` shares one cache: a second build dir compiles nothing; two builds at once make
  each entry once (per-key locks); start-up clean-up removes only its own build dir's temporaries
  there, and ``gc`` leaves the shared entries alone;
* ``gc`` removes only links that point into its own cache: a user's symlink is kept and named.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from test_cli import SLOW, check_ok, popen, rbln, summary

from rbln_build.config._layout import owner_tag
from rbln_build.store import Store

SMALL = ["matrix=plans", "model=qwen3_8b", "progress=false"]  # 2 compile keys, 4 cells: fast


def outside_with_data(tmp_path: Path) -> Path:
    """A folder of someone else's: a leftover-looking temporary folder and a key-named entry."""
    out = tmp_path / "elsewhere"
    (out / ".tmp-theirs-1-abcd").mkdir(parents=True)
    (out / ".tmp-theirs-1-abcd" / "data").write_text("theirs")
    (out / ("c" * 64)).mkdir()
    (out / ("c" * 64) / "data").write_text("theirs")
    return out


def snapshot(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def small_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("small")
    check_ok(rbln([*SMALL, f"build_dir={work / 'build'}"], cwd=work))
    return work / "build"


@pytest.mark.integration
@pytest.mark.parametrize("name", ["cache", "cache/compile", "logs", "hydra", ".doit.sqlite3"])
def test_a_name_in_the_build_dir_linked_outside_is_refused(small_build: Path, tmp_path: Path, name: str) -> None:
    build = tmp_path / "build"
    shutil.copytree(small_build, build, symlinks=True)
    outside = outside_with_data(tmp_path)
    target = build / name
    if name == ".doit.sqlite3":
        outside = tmp_path / "their.sqlite3"
        outside.write_bytes(target.read_bytes())
        before: Any = outside.read_bytes()
    else:
        before = snapshot(outside)
    if os.path.lexists(target):
        os.rename(target, tmp_path / "moved")
    target.symlink_to(outside)
    commands = [[*SMALL, f"build_dir={build}"]] + ([["gc", *SMALL, f"build_dir={build}"]] if name == "cache" else [])
    for args in commands:
        proc = rbln(args, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        [line] = proc.stderr.strip().splitlines()
        assert f"{target} resolves to {outside}, outside" in line and "Remove the link" in line
    assert (outside.read_bytes() if name == ".doit.sqlite3" else snapshot(outside)) == before


@pytest.mark.integration
def test_a_linked_cache_names_the_setting_that_shares_it(tmp_path: Path) -> None:
    build = tmp_path / "build"
    build.mkdir()
    (build / "cache").symlink_to(outside_with_data(tmp_path))
    proc = rbln([*SMALL, f"build_dir={build}"], cwd=tmp_path)
    assert proc.returncode == 2 and f"cache.dir={tmp_path / 'elsewhere'}" in proc.stderr


@pytest.mark.slow  # over 10 s: the default suite keeps under 10 minutes on 2 cores
@pytest.mark.integration
def test_two_build_dirs_share_a_cache_through_cache_dir(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    first, second = tmp_path / "a", tmp_path / "b"
    check_ok(rbln([*SMALL, f"build_dir={first}", f"cache.dir={shared}"], cwd=tmp_path))
    assert summary(first)["compiled"] == 2
    proc = rbln([*SMALL, f"build_dir={second}", f"cache.dir={shared}"], cwd=tmp_path)
    check_ok(proc)
    assert summary(second)["compiled"] == 0 and "warning" not in proc.stderr
    assert (first / "manifest.json").read_bytes() == (second / "manifest.json").read_bytes()
    for link in (second / "artifacts").iterdir():
        assert shared.resolve() in link.resolve().parents
    # a build dir's own cache folder is not silently swapped for the shared one
    own = tmp_path / "own"
    check_ok(rbln([*SMALL, f"build_dir={own}"], cwd=tmp_path))
    proc = rbln([*SMALL, f"build_dir={own}", f"cache.dir={shared}"], cwd=tmp_path)
    assert proc.returncode == 2 and "is this build dir's own cache folder" in proc.stderr


@pytest.mark.integration
def test_two_builds_at_once_on_one_shared_cache_compile_each_key_once(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    slow = {"RBLN_TEST_BACKEND_SLEEP_S": "1"}  # each compile lingers: the two builds surely overlap
    procs = [
        popen([*SMALL, SLOW, "jobs=1", f"build_dir={tmp_path / n}", f"cache.dir={shared}"], cwd=tmp_path, env=slow)
        for n in ("a", "b")
    ]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    assert summary(tmp_path / "a")["compiled"] + summary(tmp_path / "b")["compiled"] == 2
    assert (tmp_path / "a" / "manifest.json").read_bytes() == (tmp_path / "b" / "manifest.json").read_bytes()
    assert not list(shared.rglob(".tmp-*"))


# -- the Store in a shared cache ----------------------------------------------------------------------


def _slow_put(root: str, owner: str, marker: str) -> str:
    store = Store(Path(root), owner=owner)

    def fill(files: Path) -> dict[str, Any]:
        with open(marker, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(1.0)
        (files / "x").write_text("x")
        return {"made": "once"}

    return store.put("compile", "d" * 64, fill).content_hash


def test_per_key_locks_make_an_entry_once(tmp_path: Path) -> None:
    marker = tmp_path / "fills"
    with ProcessPoolExecutor(2) as pool:
        hashes = list(pool.map(_slow_put, [str(tmp_path / "shared")] * 2, ["o1", "o2"], [str(marker)] * 2))
    assert len(marker.read_text().splitlines()) == 1  # the second waited on the key's lock and took the entry
    assert hashes[0] == hashes[1]


def test_start_up_clean_up_in_a_shared_cache_removes_only_its_own(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    mine, theirs = owner_tag(tmp_path / "a"), owner_tag(tmp_path / "b")
    for tag in (mine, theirs):
        (root / "compile" / f".tmp-{'e' * 64}-{tag}-1-abcd").mkdir(parents=True)
        (root / "results" / f".tmp-{'e' * 64}.json-{tag}-1-abcd").parent.mkdir(exist_ok=True)
        (root / "results" / f".tmp-{'e' * 64}.json-{tag}-1-abcd").write_text("{}")
    assert Store(root, owner=mine).clean_temporaries() == 2
    left = sorted(p.name for p in root.rglob(".tmp-*"))
    assert left and all(theirs in name for name in left) and len(left) == 2


@pytest.mark.integration
def test_gc_keeps_a_users_symlink_and_a_shared_cache(small_build: Path, tmp_path: Path) -> None:
    build = tmp_path / "build"
    shutil.copytree(small_build, build, symlinks=True)
    (tmp_path / "mine").mkdir()
    (build / "artifacts" / "my-link").symlink_to(tmp_path / "mine")
    out = json.loads(rbln(["gc", "--json", *SMALL, f"build_dir={build}"], cwd=tmp_path).stdout)
    assert (build / "artifacts" / "my-link").is_symlink()
    assert any("my-link is not a link rbln-build made" in n for n in out["notes"])

    shared, narrow = tmp_path / "shared", [*SMALL, "matrix.budgets=[0.3]", f"build_dir={tmp_path / 's'}"]
    check_ok(rbln([*SMALL, f"build_dir={tmp_path / 's'}", f"cache.dir={shared}"], cwd=tmp_path))
    check_ok(rbln([*narrow, f"cache.dir={shared}"], cwd=tmp_path))  # the b0.5 cells leave the matrix
    before = sorted(p.relative_to(shared).as_posix() for p in shared.rglob("*"))
    proc = rbln(["gc", "--json", *narrow, f"cache.dir={shared}"], cwd=tmp_path)
    check_ok(proc)
    out = json.loads(proc.stdout)
    removed = [r["path"] for r in out["removed"]]
    assert removed and all(p.startswith("artifacts/") and p.endswith(".b0.5") for p in removed)  # links only
    assert sorted(p.relative_to(shared).as_posix() for p in shared.rglob("*")) == before
    assert any("is shared (cache.dir)" in n for n in out["notes"])
