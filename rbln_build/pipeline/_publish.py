"""Publishing a build: the manifest, the ``artifacts/<cell id>`` links and the run summary.

The manifest and the links are made from the same entries. A link is only ever a symlink that
rbln-build made, pointing into ``cache/artifacts``: a real file or folder that a user put in
``artifacts/`` is an error that names it, never removed.

A second thread makes the links while the manifest is rendered, compared with the old one and
written, since that waits on memory and the disk (a fresh 10,008-cell sweep: 22 MB of manifest
with its fsync, 7,298 new links). ``.publishing`` is written before the first change to a link or
to the manifest, and removed once the manifest and all its links are done. A run killed in between
leaves ``.publishing``, some links new, and the old manifest or the new one. The
manifest and the Store's result records are enough to roll forward: ``recover`` (at the start of
the next run, under the lock) points every link the manifest on disk names at the artifact it
names, before anything else happens. A link made for a cell that manifest does not name points at
a verified artifact of ours; the run's own publish settles it (or ``gc``, once the cell has left
the matrix).
``clean_leftovers`` removes the temporary files and links that killed runs leave in the build
directory itself (the Store cleans its own).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .._documents import read_file
from ..config import Cell
from ..errors import BuildError
from ..estimator import cell_id_problem
from ..execution import artifact_key_of
from ..store import CellResult, Store, is_key, write_atomic
from ._links import ARTIFACTS_DIR, PUBLISHING_FILE, EarlyLinks, Marker, inside, link_atomic, link_rows, ours
from ._manifest import entry_for, render_json, render_manifest, summarize

__all__ = [
    "ARTIFACTS_DIR",
    "MANIFEST_FILE",
    "SUMMARY_FILE",
    "publish",
    "OutputError",
    "write_summary",
    "inside",
    "recover",
    "clean_leftovers",
]

MANIFEST_FILE = "manifest.json"
# The manifest a build wrote itself, read back to roll its links forward: about 2.2 KB per cell (a
# 10,008-cell sweep's is 22 MB), so the 64 MiB of a document a command reads would stop at about
# 29,000 cells and skip the roll-forward without a word. 1 GiB holds about 480,000 cells.
OWN_MANIFEST_BYTES = 1 << 30
SUMMARY_FILE = "summary.json"
# Files of the build directory written through a ".tmp-<name>-*" sibling (progress-history.json: _progress)
_OWN_FILES = (MANIFEST_FILE, SUMMARY_FILE, "progress-history.json", "results.txt")


def publish(
    build_dir: Path,
    rows: list[tuple[Cell, CellResult | None]],
    sections: dict[str, Any] | None = None,
    entries: list[dict[str, Any]] | None = None,
    warn: Callable[[str], None] | None = None,
    rendered: dict[str, str] | None = None,
    early: EarlyLinks | None = None,
    resections: Callable[[list[tuple[Cell, CellResult | None]]], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Write ``manifest.json`` (only when its bytes change) and point every ok cell's link at its
    artifact, and remove the links of cells that have none (while a new manifest is written: the
    module docstring). Returns the manifest entries (``entries``:
    the rows' entries, when the caller has them already). ``sections``: more top-level manifest
    keys (a deployment's record). ``warn`` hears of a link of ours that pointed elsewhere although
    the manifest did not change (tampering, repaired). ``rendered``: cell id -> its entry's line,
    rendered already (``render_manifest``). ``early``: the links made while the workers built
    (waited for here; the rows whose result it linked are not linked again). ``resections``: ``sections``
    again from rows whose links failed, those cells failed (a deployment's record then names them)."""
    if entries is None:
        entries = [entry_for(cell, result) for cell, result in rows]
    path = build_dir / MANIFEST_FILE
    marker = Marker(build_dir / PUBLISHING_FILE) if early is None else early.marker
    if early is not None:
        early.close()
    repaired = [] if early is None else list(early.repaired)  # links of ours that pointed elsewhere
    made = None if early is None else early.made
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rbln-build-links") as linker:
        linking = linker.submit(link_rows, build_dir, rows, entries, repaired.append, marker, made)
        data = render_manifest(entries, sections, rendered)
        try:
            # The old bytes are compared, so reading more than the new ones' length is never needed (and
            # the 64 MiB limit of documents a command reads would rewrite every manifest above it).
            same = read_file(path, limit=len(data)) == data  # a FIFO or a device there is replaced, never waited on
        except OSError:
            same = False
        if not same:
            marker()  # until the links match: the next run rolls forward
            write_atomic(path, data)
        problems = linking.result()
    if same and warn is not None:
        for message in repaired:
            warn(message)
    if problems:  # the manifest names only links that exist: a cell whose link failed is a failed cell
        entries = [_unlinked(e, problems[e["cell"]]) if e["cell"] in problems else e for e in entries]
        if resections is not None:
            sections = resections(
                [
                    (c, r.failed(_unlinked_error(problems[c.id]), "output_failed", True))
                    if r is not None and r.ok and c.id in problems
                    else (c, r)
                    for c, r in rows
                ]
            )
        write_atomic(path, render_manifest(entries, sections))
    (build_dir / PUBLISHING_FILE).unlink(missing_ok=True)
    if problems:
        first = next(iter(problems.values()))
        more = (
            f" (and {len(problems) - 1} more cell(s); summary.json counts them as failed)" if len(problems) > 1 else ""
        )
        raise OutputError(first + more, entries)
    return entries


class OutputError(BuildError):
    """Some links could not be written; ``entries`` are the manifest's, as written (those cells failed)."""

    def __init__(self, message: str, entries: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.entries = entries


def _unlinked(entry: dict[str, Any], why: str) -> dict[str, Any]:
    """A manifest entry whose artifact link could not be written: failed, naming no artifact."""
    if entry["artifact"] is None:
        return entry  # it names no link; the problem is reported, the entry stands
    return {
        **entry,
        "artifact": None,
        "serving": None,
        "status": "failed",
        "error": _unlinked_error(why),
        "error_kind": "output_failed",
    }


def _unlinked_error(why: str) -> str:
    return f"its artifact was built but its link could not be written: {why}"


def write_summary(
    build_dir: Path,
    entries: list[dict[str, Any]],
    compiled: int,
    redone: set[str],
    warnings: list[str],
    timings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """summary.json: the run's counts (``summarize``), its warnings and, when given, its ``timings``
    (``compiles``: each compile's seconds; ``cell_cost_s``: each redone cell's seconds)."""
    summary = summarize(entries, compiled, redone)
    summary["warnings"] = list(warnings)
    summary.update(timings or {})
    write_atomic(build_dir / SUMMARY_FILE, render_json(summary))
    return summary


def clean_leftovers(build_dir: Path, shared: bool = False) -> int:
    """Remove what killed runs left in the build directory: ``.tmp-manifest.json-*``,
    ``.tmp-summary.json-*``, ``.tmp-results.txt-*``, ``.tmp-progress-history.json-*`` and ``.tmp-.publishing-*`` files (``write_atomic``), ``artifacts/.tmp-*`` symlinks (``link_atomic``)
    and the inventory cache's ``*.json.*.tmp`` files (not in a ``shared`` cache: they may be another
    build's, in flight). Only those names, and never a directory: a user's own entry is left alone.
    Call only while holding the build lock."""
    removed = 0
    candidates = [
        *(p for name in (*_OWN_FILES, PUBLISHING_FILE) for p in build_dir.glob(f".tmp-{name}-*")),
        *([] if shared else (build_dir / "cache" / "inventory").glob("*.json.*.tmp")),
    ]
    links = build_dir / ARTIFACTS_DIR
    if links.is_dir() and not links.is_symlink():
        candidates += [p for p in links.glob(".tmp-*") if ours(p)]
    for path in candidates:
        if path.is_symlink() or path.is_file():
            try:
                path.unlink()
                removed += 1
            except OSError:
                pass
    return removed


def recover(build_dir: Path, store: Store) -> int:
    """Point each link the manifest names at the artifact it names (a previous run may have been
    killed after writing the manifest and before re-linking). Returns how many links changed.
    Anything the manifest or a record says is checked before it becomes a path: a cell id must be
    a valid name inside ``artifacts/``, an artifact key a hex digest whose entry verifies and is the
    one derived from that entry's compile key, NPU and block count (the record's own). Only
    after an interrupted publish (``.publishing`` left behind), so a no-op run pays nothing."""
    marker = build_dir / PUBLISHING_FILE
    if not marker.exists():
        return 0
    changed = _roll_forward(build_dir, store)
    marker.unlink(missing_ok=True)
    return changed


def _roll_forward(build_dir: Path, store: Store) -> int:
    try:
        cells = json.loads(read_file(build_dir / MANIFEST_FILE, limit=OWN_MANIFEST_BYTES))["cells"]
        items = list(cells.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return 0  # no manifest, or not one of ours: this run writes a new one
    links = build_dir / ARTIFACTS_DIR
    changed = 0
    for cell_id, entry in items:
        try:
            artifact = entry["artifact"]
            if artifact is None or cell_id_problem(cell_id) is not None:
                continue
            body = store.load_record("results", entry["cell_key"])
            result = None if body is None else CellResult.from_json(body)
            if result is None or not is_key(result.artifact_key) or result.artifact_hash != artifact["content_hash"]:
                continue
            cached = store.lookup("artifacts", result.artifact_key)  # type: ignore[arg-type]
            if cached is None or cached.content_hash != artifact["content_hash"]:
                continue
            meta = cached.meta  # the record's artifact must be the one its own block count derives
            derived = artifact_key_of(meta.get("compile_key"), meta["npu"], meta["kvcache_num_blocks"])
            if (
                derived != result.artifact_key
                or result.cell_key != entry["cell_key"]
                or meta.get("compile_key") != result.compile_key
                or meta.get("kvcache_num_blocks") != result.kvcache_num_blocks
            ):
                continue
            link = links / cell_id
            inside(build_dir, link.parent)
            target = f"../cache/artifacts/{result.artifact_key}/files"
            if link.is_symlink() and (os.readlink(link) == target or not ours(link)):
                continue
            link_atomic(link, target)
            changed += 1
        except (KeyError, TypeError, ValueError, OSError, BuildError):
            continue  # this link stays as it is; the run's publish settles it
    return changed
