"""The build directory's lock (``<build_dir>/.lock``): one writer at a time.

``rbln-build`` (a build), ``rbln-build gc`` and ``doit`` through ``dodo.py`` all take it, so none
of them removes or rewrites what another is using. A second taker says it waits, then waits.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from filelock import FileLock

__all__ = ["LOCK_FILE", "acquire_build_lock", "lock_for_doit"]

LOCK_FILE = ".lock"  # <build_dir>/.lock


def acquire_build_lock(build_dir: Path, who: str = "rbln-build") -> FileLock:
    """Take the lock (waiting, with a message, if another run holds it); the caller releases it."""
    from filelock import FileLock, Timeout

    build_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(build_dir / LOCK_FILE))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(f"{who}: waiting for another rbln-build run on {build_dir} to finish ...", file=sys.stderr, flush=True)
        lock.acquire()
    return lock


# doit commands that only read the task list or the state: they need no lock.
_READ_ONLY_DOIT = {"list", "info", "help", "tabcompletion", "dumpdb"}


def lock_for_doit(build_dir: Path, argv: list[str]) -> FileLock | None:
    """For dodo.py: take the build lock when doit will run tasks or change its state (``doit``,
    ``doit run``, ``doit <task>``, ``doit forget``, ...), held until the process exits."""
    if set(argv[1:]) & _READ_ONLY_DOIT:  # a read-only command word anywhere (options may precede it)
        return None
    return acquire_build_lock(build_dir, "doit")
