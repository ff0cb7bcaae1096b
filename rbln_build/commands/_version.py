"""``rbln-build --version``: the version, the commit of a git checkout it runs from, the toolchain."""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

__all__ = ["version_text"]


def version_text() -> str:
    """rbln-build's version and the toolchain it runs with, read from the installed packages'
    metadata (nothing heavy is imported)."""
    from .. import __version__

    parts = []
    for dist in ("torch", "transformers", "optimum-rbln", "hydra-core", "doit"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} not installed")
    commit = _checkout_commit()
    return f"rbln-build {__version__} ({'commit ' + commit + '; ' if commit else ''}{', '.join(parts)})"


def _checkout_commit() -> str | None:
    """The commit of the git checkout rbln-build runs from (``+modified`` when tracked files differ);
    None for an installed wheel: only a work tree whose top holds rbln_build/ and pyproject.toml."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists() or not (root / "pyproject.toml").is_file():
        return None
    git = ["git", "-C", str(root)]
    try:
        head = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10)
        status = subprocess.run([*git, "status", "--porcelain", "-uno"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+modified" if status.stdout.strip() else "")
