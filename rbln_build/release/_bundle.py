"""Stage a release: the selected cells of a built manifest, verified, as real files and ``release.json``.

Every cell's files are copied out of the build's Store (``artifacts/<cell id>`` is a link into
``cache/``; a cell without a link, in a merge's build dir, from the remote cache: ``_remote_source``)
into ``<staging>/<cell id>/``; the copy is hashed with the Store's own content hash
and compared with the manifest's ``artifact.content_hash`` before anything is published, so what is
released is byte for byte what the build recorded. The model card (``README.md``) is added after
that check, then the cell's own integrity file (``rbln-build-files.json``: every other file's size
and sha256, its self-hash), so a cell that travels alone (a Hub repo) checks itself. ``release.json``
is written last; it is deterministic (sorted keys, no timestamps, no
absolute paths), so the same build and selection give the same bytes.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._documents import absent, hash_stream, parse_json, read_document
from ..errors import IntegrityError, UserError
from ..store import ENTRY_FILE, content_hash, is_key
from ._card import card_for
from ._format import CARD_FILE, CELL_FILES, CELL_FORMAT, FORMAT, RELEASE_FILE, render_release
from ._provenance import provenance_for
from ._remote_source import RemoteSource

__all__ = ["Selection", "StagedRelease", "check_name", "read_manifest", "select_cells", "stage_release"]

RELEASED_STATUSES = ("ok",)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")


def check_name(name: str, what: str) -> str:
    """A release name or cell id: one safe path component (letters, digits, ``._+-``; no leading dot)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise UserError(
            f"{what} {name!r} is not a safe folder name: use letters, digits and . _ + - "
            "(not starting with a dot, no '..', at most 200 characters)."
        )
    return name


@dataclass(frozen=True)
class Selection:
    """Which cells: globs on cell ids (any matches), and/or the cells of a deployment. Empty: all."""

    globs: tuple[str, ...] = ()
    deployment: str | None = None
    allow_failed: bool = False

    def to_json(self) -> dict[str, Any]:
        # not allow_failed: what it left out is in not_released, and the same cells are the same release
        return {"cells": list(self.globs), "deployment": self.deployment}


@dataclass
class StagedRelease:
    root: Path  # the staging folder: one folder per cell, release.json
    name: str
    data: bytes  # release.json
    cells: list[str]
    not_released: dict[str, str]
    files: dict[str, dict[str, Any]] = field(default_factory=dict)


def read_manifest(build_dir: Path) -> tuple[bytes, dict[str, Any]]:
    """(bytes, parsed) of ``build_dir``'s manifest, read as every user document is (a regular file, size
    cap, nesting bounded: a FIFO, ``/dev/zero`` or a deep document is an error, never a hang); a
    manifest without a ``cells`` object, or whose ``deployments`` is not an object, is refused."""
    path = build_dir / "manifest.json"
    if absent(path, error=UserError, hint="pass the build directory with --build-dir"):
        raise UserError(f"{path}: no manifest; build first (rbln-build) or pass --build-dir.")
    data = read_document(path, error=UserError, hint="rebuild it (rbln-build) or pass another --build-dir")
    manifest = parse_json(data, str(path), error=UserError, hint="rebuild it (rbln-build)")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("cells"), dict):
        raise UserError(f"{path}: not a readable rbln-build manifest (no 'cells' object); rebuild it.")
    if not isinstance(manifest.get("deployments") or {}, dict):
        got = type(manifest["deployments"]).__name__
        raise UserError(f"{path}: not a readable rbln-build manifest ('deployments' is a {got}); rebuild it.")
    return data, manifest


def select_cells(manifest: dict[str, Any], selection: Selection, where: str) -> tuple[list[str], dict[str, str]]:
    """(cell ids to release, {cell id: why not released}) for ``selection`` over ``manifest``."""
    cells: dict[str, Any] = manifest["cells"]
    chosen = set(cells)
    if selection.deployment is not None:
        record = (manifest.get("deployments") or {}).get(selection.deployment)
        if not isinstance(record, dict):
            known = ", ".join(sorted(manifest.get("deployments") or {})) or "none"
            raise UserError(
                f"--deployment {selection.deployment}: {where} holds no build of that deployment (built: {known}); "
                f"build it first: rbln-build deployment={selection.deployment}"
            )
        models = record.get("models")
        chosen = (
            {str(m.get("cell")) for m in models.values() if isinstance(m, dict)} if isinstance(models, dict) else set()
        )
        if not chosen:
            raise UserError(f"--deployment {selection.deployment}: its record in {where} names no cells; rebuild it.")
    if selection.globs:
        matched: set[str] = set()
        for glob in selection.globs:
            hits = {c for c in chosen if fnmatch.fnmatchcase(c, glob)}
            if not hits:
                sample = ", ".join(sorted(chosen)[:3])
                raise UserError(f"--cells {glob!r} matches no cell of {where} (cells there are e.g. {sample}).")
            matched |= hits
        chosen = matched
    released, skipped, failed = [], {}, []
    for cid in sorted(chosen):
        entry = cells.get(cid)
        status = entry.get("status") if isinstance(entry, dict) else None
        if status in RELEASED_STATUSES and isinstance(entry.get("artifact"), dict):  # type: ignore[union-attr]
            released.append(cid)
        elif status == "expected_failure" or selection.allow_failed:
            skipped[cid] = str(status)
        else:
            failed.append(f"{cid} ({status})")
    if failed:
        more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
        raise UserError(
            f"{len(failed)} selected cell(s) of {where} did not build: {', '.join(failed[:5])}{more}. "
            "Fix the build, narrow the selection (--cells GLOB), or pass --allow-failed to release the others."
        )
    if not released:
        raise UserError(f"nothing to release: no selected cell of {where} has an artifact.")
    return released, skipped


def _copy_verified(
    build_dir: Path, cid: str, record: dict[str, Any], dest: Path, remote: RemoteSource | None = None
) -> None:
    """Copy the cell's artifact into ``dest`` (real files) and check it against the manifest record:
    from its link in the build dir, or, where there is none (a merge's build dir), from ``remote``."""
    link = build_dir / "artifacts" / cid
    if remote is not None and not link.is_symlink() and not link.exists():
        entry = remote.fetch(cid, record)
        try:
            _copy_checked(entry.files, entry.meta, cid, record, dest, f"{remote.url} (artifact of cell {cid!r})")
        finally:
            remote.drop(entry)
        return
    cache = (build_dir / "cache" / "artifacts").resolve()
    try:
        source = link.resolve(strict=True)
    except (OSError, RuntimeError):
        raise IntegrityError(
            f"{link}: the artifact of cell {cid!r} is missing; run rbln-build to restore it, then release again."
        ) from None
    if source.parent.parent != cache or not is_key(source.parent.name) or source.name != "files":
        raise IntegrityError(
            f"{link}: resolves to {source}, not an entry of {cache}; the build directory was changed by hand. "
            "Run rbln-build to restore it."
        )
    entry_file = source.parent / ENTRY_FILE
    try:
        meta = parse_json(read_document(entry_file), str(entry_file))["meta"]
    except (UserError, KeyError, TypeError) as exc:
        raise IntegrityError(f"{entry_file}: unreadable cache entry of cell {cid!r} ({exc}); rebuild it.") from None
    _copy_checked(source, meta, cid, record, dest, str(link))


def _copy_checked(source: Path, meta: Any, cid: str, record: dict[str, Any], dest: Path, where: str) -> None:
    """Copy ``source`` (an entry's files) into ``dest`` as real files; its content hash must be the record's."""
    for folder, dirs, names in os.walk(source):
        dirs.sort()
        here = Path(folder)
        for name in [*sorted(names), *(d for d in dirs if (here / d).is_symlink())]:
            path = here / name
            rel = path.relative_to(source)
            if path.is_symlink():
                target = path.resolve()
                if source.resolve() not in target.parents or not target.is_file():
                    raise IntegrityError(f"{path}: a link out of cell {cid!r}'s artifact; rebuild the cell.")
            elif not path.is_file():
                raise IntegrityError(f"{path}: not a regular file in cell {cid!r}'s artifact; rebuild the cell.")
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)  # follows a link inside the artifact: the release holds real files
            os.chmod(out, 0o644)
    actual = content_hash(dest, meta)
    recorded = record["artifact"].get("content_hash")
    if actual != recorded:
        raise IntegrityError(
            f"{where}: content hash {actual} does not match {recorded} recorded for cell {cid!r} in the manifest; "
            "the artifact changed after the build. Nothing was released: rebuild the cell (rbln-build) and release again."
        )


def _file_digest(path: Path) -> dict[str, Any]:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        size = hash_stream(h, f)
    return {"sha256": h.hexdigest(), "size": size}


def _files_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def stage_release(
    build_dir: Path,
    name: str,
    selection: Selection,
    staging: Path,
    project_root: Path,
    exclude: tuple[Path, ...] = (),
    hub_org: str | None = None,
    remote: RemoteSource | None = None,
) -> StagedRelease:
    """Write the release ``name`` of ``build_dir``'s manifest into ``staging`` (created; must not exist).
    ``project_root``: whose git commit is recorded; ``exclude``: paths git's clean check ignores;
    ``hub_org``: the Hub organization the cells are uploaded under (``--layout hub``), named in the cards;
    ``remote``: where cells without an ``artifacts/`` link in ``build_dir`` are taken from (``_remote_source``)."""
    check_name(name, "release name")
    manifest_path = build_dir / "manifest.json"
    manifest_bytes, manifest = read_manifest(build_dir)
    released, skipped = select_cells(manifest, selection, str(manifest_path))
    staging.mkdir(parents=True)
    files: dict[str, dict[str, Any]] = {}
    cell_records: dict[str, Any] = {}
    for cid in released:
        check_name(cid, "cell id")
        record = manifest["cells"][cid]
        cell_dir = staging / cid
        cell_dir.mkdir()
        _copy_verified(build_dir, cid, record, cell_dir, remote)
        card = cell_dir / CARD_FILE
        if card.exists():
            raise IntegrityError(
                f"{build_dir / 'artifacts' / cid / CARD_FILE}: cell {cid!r} already holds a {CARD_FILE}; "
                "the release's model card would replace it. Remove it from the recipe's files."
            )
        card.write_text(card_for(cid, record, _cell_meta(cell_dir), hub_org), encoding="utf-8")
        own = {path.relative_to(cell_dir).as_posix(): _file_digest(path) for path in _files_of(cell_dir)}
        if CELL_FILES in own:
            raise IntegrityError(
                f"{build_dir / 'artifacts' / cid / CELL_FILES}: cell {cid!r} already holds a {CELL_FILES}; "
                "the release's integrity file would replace it. Remove it from the recipe's files."
            )
        cell_files = {"format": CELL_FORMAT, "cell": cid, "release": name, "files": own, "record": record}
        (cell_dir / CELL_FILES).write_bytes(render_release(cell_files))
        for path in _files_of(cell_dir):
            files[path.relative_to(staging).as_posix()] = _file_digest(path)
        cell_records[cid] = {"dir": cid, "record": record}
    body = {
        "format": FORMAT,
        "name": name,
        "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
        "selection": selection.to_json(),
        "cells": cell_records,
        "not_released": skipped,
        "files": files,
        "provenance": provenance_for(manifest, released, project_root, exclude),
    }
    data = render_release(body)
    (staging / RELEASE_FILE).write_bytes(data)
    return StagedRelease(staging, name, data, released, skipped, files)


def _cell_meta(cell_dir: Path) -> dict[str, Any]:
    try:
        meta = parse_json(read_document(cell_dir / "rbln-build.json"), "rbln-build.json")
        return meta if isinstance(meta, dict) else {}
    except UserError:
        return {}
