"""Reproduce a release: rebuild its cells from the commit its provenance names and compare every
file with its ``release.json`` (docs/releasing.md, "Reproduce a release").

_checkout  this checkout against the release's commit and clean tree; the toolchain here against its
_rebuild   the matrix of exactly the released cells, built by the real CLI into a fresh directory
_compare   the release against the rebuild: files, then cell records, with the likely cause
_inside    where two versions of a file differ: a JSON key path, an archive member, a tensor
_cli       the ``reproduce`` command: arguments, order of work, messages
"""

from __future__ import annotations

__all__ = ["reproduce_main"]


def reproduce_main(argv: list[str]) -> int:
    """``rbln-build reproduce RELEASE [--cells GLOB] ...``."""
    from ._cli import main

    return main(argv)
