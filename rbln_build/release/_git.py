"""The git state of a work tree: its commit, whether it is clean, which files are not.

One place for the three who ask: a release's provenance (``git_state``), ``reproduce`` checking a
checkout against the commit a release records (``git_state``, ``dirty_files``), and ``--version``
naming the commit of rbln-build's own checkout (``checkout_commit``). git runs as a subprocess
(``git -C root ...``); nothing here writes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

__all__ = ["checkout_commit", "dirty_files", "git_state", "run_git"]


def run_git(root: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``git -C root ARGS``, its output as text; FileNotFoundError without git, TimeoutExpired."""
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=timeout)


def _status(root: Path, toplevel: Path, exclude: tuple[Path, ...]) -> subprocess.CompletedProcess[str]:
    """``git status --porcelain`` of the whole work tree (tracked and untracked files), without the
    folders in ``exclude`` that lie inside it."""
    specs = [":(top)"]
    for path in exclude:
        try:
            rel = path.resolve().relative_to(toplevel)
        except ValueError:
            continue
        if rel.parts:
            specs.append(f":(exclude,top){rel.as_posix()}")
    return run_git(root, "status", "--porcelain", "--untracked-files=normal", "--", *specs)


def git_state(root: Path, exclude: tuple[Path, ...] = ()) -> dict[str, Any]:
    """{"commit": sha, "clean": bool} of the git work tree holding ``root``, or commit None and why.
    ``exclude``: folders (the build directory, a local release destination) the clean check ignores."""
    try:
        top = run_git(root, "rev-parse", "--show-toplevel")
    except FileNotFoundError:
        return {"commit": None, "clean": None, "note": "git is not installed"}
    except subprocess.TimeoutExpired:
        return {"commit": None, "clean": None, "note": "git did not answer in 30 s"}
    if top.returncode != 0:
        return {"commit": None, "clean": None, "note": "the project is not in a git repository"}
    head = run_git(root, "rev-parse", "--verify", "-q", "HEAD")
    if head.returncode != 0:
        return {"commit": None, "clean": None, "note": "the git repository has no commit yet"}
    status = _status(root, Path(top.stdout.strip()).resolve(), exclude)
    return {"commit": head.stdout.strip(), "clean": status.returncode == 0 and not status.stdout.strip()}


def dirty_files(root: Path, exclude: tuple[Path, ...] = ()) -> list[str]:
    """The paths ``git status`` shows as changed or untracked in the work tree holding ``root``
    (``exclude`` aside); call after ``git_state`` found a commit."""
    top = run_git(root, "rev-parse", "--show-toplevel")
    status = _status(root, Path(top.stdout.strip()).resolve(), exclude)
    return [line[3:] for line in status.stdout.splitlines() if line.strip()]


def checkout_commit(root: Path) -> str | None:
    """The short commit of the git checkout at ``root``, with ``+modified`` when tracked files differ;
    None when git is missing, slow or has no commit there."""
    try:
        head = run_git(root, "rev-parse", "--short=12", "HEAD", timeout=10)
        status = run_git(root, "status", "--porcelain", "-uno", timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+modified" if status.stdout.strip() else "")
