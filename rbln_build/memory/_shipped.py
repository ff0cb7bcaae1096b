"""Where the configs and recipes that ship with rbln-build live.

In a clone (or an editable install) they are the repository's ``conf/`` and ``recipes/``, where a
user sees and edits them. A wheel carries copies of both as package data under
``rbln_build/_data/`` (``setup.py`` copies them in at build time), because a wheel has no
repository around it. The package copy wins when it exists: an installed tool never reads a
``conf/`` that merely happens to sit beside site-packages.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["shipped_dir", "SHIPPED_NAMES"]

SHIPPED_NAMES = ("conf", "recipes")
_PACKAGE = Path(__file__).resolve().parents[1]  # rbln_build/


def shipped_dir(name: str) -> Path:
    """The shipped ``conf`` or ``recipes`` folder: the wheel's package data, else the clone's root."""
    assert name in SHIPPED_NAMES, name
    packaged = _PACKAGE / "_data" / name
    if packaged.is_dir():
        return packaged
    return _PACKAGE.parent / name
