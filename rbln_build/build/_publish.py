"""Publishing a build: the manifest, the ``artifacts/<cell id>`` links and the run summary.

The manifest is written first and the links after it, from the same entries. A link is only ever a
symlink that rbln-build made, pointing into ``cache/artifacts``: a real file or folder that a user put
in ``artifacts/`` is an error that names it, never removed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import BuildError
from ._manifest import entry_for, render_json, render_manifest, summarize
from ._matrix import Cell
from ._result import CellResult
from ._stages import reusable
from ._store import Store, write_atomic

__all__ = ["ARTIFACTS_DIR", "MANIFEST_FILE", "SUMMARY_FILE", "collect", "publish", "write_summary", "inside"]

ARTIFACTS_DIR = "artifacts"
MANIFEST_FILE = "manifest.json"
SUMMARY_FILE = "summary.json"


def inside(root: Path, path: Path) -> Path:
    """``path`` resolved, if it lies inside ``root`` (resolved); else a BuildError naming both."""
    real_root = root.resolve()
    real = path.resolve()
    if real != real_root and real_root not in real.parents:
        raise BuildError(f"{path} resolves to {real}, outside {real_root}; refusing to write there.")
    return real


def collect(store: Store, cells: list[Cell]) -> list[tuple[Cell, CellResult | None]]:
    """Each cell with its stored result; None when it has none, or its artifact is gone or damaged
    (the manifest must not name an artifact that is not there)."""
    rows: list[tuple[Cell, CellResult | None]] = []
    for cell in cells:
        body = store.load_record("results", cell.cell_key)
        result = None
        if body is not None:
            try:
                result = CellResult.from_json(body)
            except (TypeError, ValueError):
                result = None
        if result is not None and result.ok and reusable(store, cell) is None:
            result = None
        rows.append((cell, result))
    return rows


def publish(
    build_dir: Path, rows: list[tuple[Cell, CellResult | None]], sections: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Write ``manifest.json`` (only when its bytes change), then point every ok cell's link at its
    artifact and remove the links of cells that have none. Returns the manifest entries.
    ``sections``: more top-level manifest keys (a deployment's record)."""
    entries = [entry_for(cell, result) for cell, result in rows]
    data = render_manifest(entries, sections)
    path = build_dir / MANIFEST_FILE
    try:
        same = path.read_bytes() == data
    except OSError:
        same = False
    if not same:
        write_atomic(path, data)
    links = build_dir / ARTIFACTS_DIR
    for (cell, result), entry in zip(rows, entries):
        link = links / cell.id
        inside(links, link.parent)
        if entry["artifact"] is None or result is None or result.artifact_key is None:
            if link.is_symlink():
                link.unlink()
            elif link.exists():
                raise BuildError(f"{link} is not a link rbln-build made; move it out of {links} (rbln-build never deletes it).")
            continue
        link_atomic(link, f"../cache/artifacts/{result.artifact_key}/files")
    return entries


def link_atomic(link: Path, target: str) -> None:
    """Make ``link`` a symlink to ``target`` (replacing an older symlink of ours atomically). A real
    file or folder there is never replaced: it is the user's."""
    if link.is_symlink():
        if os.readlink(link) == target:
            return
    elif link.exists():
        raise BuildError(f"{link} is not a link rbln-build made; move it out of {link.parent} (rbln-build never deletes it).")
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.parent / f".tmp-{link.name}-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    finally:
        if tmp.is_symlink():
            tmp.unlink()


def write_summary(build_dir: Path, entries: list[dict[str, Any]], compiled: int, redone: set[str],
                  warnings: list[str]) -> dict[str, Any]:
    summary = summarize(entries, compiled, redone)
    summary["warnings"] = list(warnings)
    write_atomic(build_dir / SUMMARY_FILE, render_json(summary))
    return summary
