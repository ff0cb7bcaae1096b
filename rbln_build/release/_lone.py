"""A released cell that travels alone (a Hub repo downloaded with ``--local-dir``, a copied folder): checked
against its own ``rbln-build-files.json`` as a release is against ``release.json`` (``_verify``): its
self-hash, every file it lists (size, sha256, a regular file), nothing else in the folder but the Hub's
bookkeeping (``.gitattributes``, ``.cache/huggingface/``), which is never loaded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import IntegrityError, UserError
from ._format import (
    CELL_FILES,
    CELL_FORMAT,
    FORMAT,
    HUB_BOOKKEEPING,
    MAX_RELEASE_JSON_BYTES,
    RELEASE_FILE,
    SELF_HASH_KEY,
    self_hash,
)
from ._verify import (
    LocalRelease,
    Verdict,
    _check_listed,
    _checked_files,
    _no_such_cell,
    _read_bounded,
    _verify,
    verify_release,
)

__all__ = ["check_released_cell", "is_lone_cell", "verify_cell", "verify_location", "verify_lone_cell"]


def is_lone_cell(folder: Path) -> bool:
    """A folder holding a cell's own integrity file and no release.json. A path the OS refuses to look
    at (a name too long) is not one: the caller's own checks say what is wrong with it."""
    try:
        return LocalRelease._kind(folder / RELEASE_FILE) is None and LocalRelease._kind(folder / CELL_FILES) is not None
    except (OSError, ValueError):
        return False


def _hub_bookkeeping(rel: str) -> bool:
    return any(rel == b or (b.endswith("/") and rel.startswith(b)) for b in HUB_BOOKKEEPING)


def verify_lone_cell(folder: Path) -> Verdict:
    """Check a cell folder against its own ``rbln-build-files.json`` (no ``release.json`` needed)."""
    cell = LocalRelease(folder)
    verdict = Verdict(str(folder), cells=1, checked_against=CELL_FILES)
    problems = verdict.problems
    present = {rel: kind for rel, kind in cell.listing().items() if not _hub_bookkeeping(rel)}
    kind = present.pop(CELL_FILES, None)
    if kind != "file":
        problems.append((CELL_FILES, "missing" if kind is None else f"a {kind}"))
        return verdict
    try:
        body = json.loads(_read_bounded(cell, CELL_FILES, MAX_RELEASE_JSON_BYTES))
        if not isinstance(body, dict) or body.get("format") != CELL_FORMAT or not isinstance(body.get("files"), dict):
            raise ValueError(f"not an rbln-build cell's integrity file (format {CELL_FORMAT!r})")
        if body.get(SELF_HASH_KEY) != self_hash(body):
            raise ValueError(f"edited: its {SELF_HASH_KEY} does not match its content")
        # the same path and digest checks as release.json's, with the cell's folder as the one cell
        listed = {
            rel.split("/", 1)[1]: v
            for rel, v in _checked_files(
                {"format": FORMAT, "cells": {"cell": {}}, "files": {f"cell/{r}": d for r, d in body["files"].items()}}
            ).items()
        }
    except (OSError, ValueError, RecursionError, AttributeError) as exc:
        problems.append((CELL_FILES, str(exc)))
        return verdict
    verdict.name = body.get("release") if isinstance(body.get("release"), str) else None
    _check_listed(cell, present, listed, verdict, CELL_FILES)
    return verdict


def verify_location(location: str, key: Path | None = None) -> Verdict:
    """``rbln-build verify``'s argument: a lone cell's folder (its own ``rbln-build-files.json``, no
    ``release.json``) is checked alone; anything else as a release (``verify_release``)."""
    folder = Path(location)
    try:
        lone = "://" not in location and folder.is_dir() and is_lone_cell(folder)
    except (OSError, ValueError):  # a name too long, a NUL: verify_release says what is wrong with it
        lone = False
    if lone:
        if key is not None:
            raise UserError(
                f"{location}: a lone cell (its own {CELL_FILES}, no {RELEASE_FILE}) has no signature to check; "
                "verify the release it came from with --key, or drop --key."
            )
        return verify_lone_cell(folder)
    return verify_release(location, key)


def verify_cell(cell_dir: Path) -> Verdict | None:
    """Check one released cell folder (``<release>/<cell id>``) against its release's
    ``release.json``, as ``python -m rbln_build.run`` does before it loads a released cell: the
    self-hash, every file listed under the cell (size, sha256, a regular file) and nothing else in
    the folder. The signature is not checked here (``verify --key`` does). Without ``release.json``
    beside it, a cell that travels alone is checked against its own ``rbln-build-files.json``; None
    when it has neither: not a released cell (a built one, or a copy without that file)."""
    folder = Path(os.path.abspath(cell_dir))
    root = folder.parent
    if LocalRelease._kind(root / RELEASE_FILE) is None:
        return verify_lone_cell(folder) if is_lone_cell(folder) else None
    if not os.path.lexists(folder):
        _no_such_cell(folder)  # a mistyped cell name under a release: the close names, not "damaged"
    return _verify(LocalRelease(root), None, only=folder.name)


def check_released_cell(folder: Path) -> None:
    """A released cell (``<release>/<cell id>``, release.json beside it; or alone, with its own
    rbln-build-files.json) is checked against release.json (or that file) before anything in it is read: its files' sizes and sha256, nothing extra, no
    link, release.json's self-hash. IntegrityError naming the first problem; a built cell passes."""
    verdict = verify_cell(folder)
    if verdict is None or verdict.ok:
        return
    rel, problem = verdict.problems[0]
    more = f" (and {len(verdict.problems) - 1} more problem(s))" if len(verdict.problems) > 1 else ""
    release = Path(verdict.location)
    what = "release" if verdict.checked_against == RELEASE_FILE else "cell"
    raise IntegrityError(
        f"{release / rel}: {problem}{more}; this released cell does not match {release / verdict.checked_against}. "
        f"Refusing to load it: check the {what} (rbln-build verify {release}) and fetch it again."
    )
