"""What a run does first, holding the build lock, before any task: clean what killed runs left,
roll the artifact links forward to the manifest, check doit's state file, and scope the memory
model's inventory cache to the build directory."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import check_contained, link_shared_cache
from ..store import Store
from ._publish import clean_leftovers, recover

__all__ = ["STATE_FILE", "INVENTORY_ENV", "start_run", "check_state_file", "scope_inventory_cache"]

STATE_FILE = ".doit.sqlite3"
INVENTORY_ENV = "RBLN_BUILD_CACHE"  # rbln_build.memory._inventory's cache root


def start_run(
    build_dir: Path,
    store: Store,
    notice: Callable[[str], None],
    warn: Callable[[str], None],
    cache_dir: Path | None = None,
) -> None:
    """Refuse a name in the build dir that resolves outside it (``config._layout``; with ``cache_dir``,
    link the shared cache), remove what killed runs left (in a shared cache: only this build dir's),
    roll the links forward to the manifest, and move a damaged doit state file aside. ``notice``
    shows a line; ``warn`` also records it in the summary."""
    check_contained(build_dir, cache_dir)  # nothing in build_dir is followed out (exit 2)
    if cache_dir is not None:
        link_shared_cache(build_dir, cache_dir)
    removed = store.clean_temporaries() + clean_leftovers(build_dir, shared=cache_dir is not None)
    if removed:
        notice(f"removed {removed} temporary file(s) left by an interrupted build")
    relinked = recover(build_dir, store)
    if relinked:
        notice(f"re-linked {relinked} artifact(s) to the manifest of an interrupted build")
    check_state_file(build_dir / STATE_FILE, warn)


def check_state_file(path: Path, warn: Any) -> None:
    """Move a doit state file that sqlite cannot read (truncated, overwritten) aside, with a warning:
    it only saves the up-to-date checks, which the Store answers again."""
    import sqlite3

    if not path.exists():
        return
    try:
        conn = sqlite3.connect(path)
        try:
            ok = conn.execute("pragma quick_check").fetchone()[0] == "ok"
        finally:
            conn.close()
    except sqlite3.Error:
        ok = False
    if not ok:
        aside = path.with_name(path.name + ".corrupt")
        os.replace(path, aside)
        warn(
            f"{path} is damaged (not a readable sqlite database); moved it to {aside.name} and rebuilding the "
            "up-to-date checks from the cache."
        )


def scope_inventory_cache(build_dir: Path) -> None:
    """Unless the user chose a place (RBLN_BUILD_CACHE), keep the memory model's parameter
    inventories under this build directory (``cache/inventory``), so ``rm -rf build`` resets
    everything. Staleness is the inventory cache's own key's job (``rbln_build.memory._inventory``)."""
    if not os.environ.get(INVENTORY_ENV):
        os.environ[INVENTORY_ENV] = str(build_dir / "cache")
