"""``rbln-build gc [overrides] [--keep MANIFEST ...] [--dry-run] [--json]``: remove what no build needs.
(``rbln-build gc --remote ... MANIFEST...`` cleans the remote cache instead: ``_gc_remote``.)

Kept: everything the current ``manifest.json`` references, everything a ``--keep`` manifest or
release (its folder or its ``release.json``: the manifest records of its cells) references, and everything the composed matrix's cells would use (so a build
half done for the current config is not thrown away). A manifest references, for each cell, its
compile key (``cache/compile``, ``cache/failures``), its cell key (``cache/results``) and the
artifact its result points at (``cache/artifacts``), and the stage entries its compile entry names
(``cache/quantized``: a variant's quantized checkpoint; ``cache/quality``: the float side of its
quality figures; ``variants.referenced``); a composed cell not compiled yet keeps those it would use
(``variants.stage_keys``). A pack of records (``store._files``, record packs) is kept
while any cell it holds is kept; one that does not verify is removed.

Removed: ``artifacts/<cell id>`` links of cells in neither the matrix nor the manifest (only
symlinks that rbln-build made, pointing into its own cache; a user's file, folder or link there is
named and left alone), and every cache entry and record not kept (a compile key's results index goes with
its compile entry). A shared cache (``cache.dir``) is
left alone: other build dirs use its entries, and no one build dir knows which. Every removal is
checked, after resolving, to lie inside the build dir's ``artifacts/`` or cache. ``cache/inventory`` and ``cache/weights`` (the memory model's and the
checkpoints' digest caches, small) are left alone. gc holds the build lock, so it never races a
build. It reports what it removed and the bytes freed; ``--dry-run`` reports the same, removes nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._documents import absent, load_json, read_file
from ..errors import ConfigError
from ..pipeline import ours
from ..store import ENTRY_FILE, PACK_SUFFIX, RECORD_KINDS, CellResult, Store, is_key, read_pack
from ..variants import FLOAT_KIND, KIND, referenced, stage_keys

__all__ = ["Kept", "plan_gc", "main"]

ENTRY_KINDS = ("compile", "artifacts", KIND, FLOAT_KIND)


@dataclass
class Kept:
    cell_ids: set[str] = field(default_factory=set)
    keys: dict[str, set[str]] = field(default_factory=lambda: {k: set() for k in (*ENTRY_KINDS, *RECORD_KINDS)})

    def add_cell(self, store: Store, cell_id: str, compile_key: Any, cell_key: Any, spec: Any = None) -> None:
        self.cell_ids.add(cell_id)
        for kind, key in (stage_keys(spec) if spec is not None else {}).items():  # what its compile would use
            self.keys[kind].add(key)
        if is_key(compile_key):
            self.keys["compile"].add(compile_key)
            self.keys["failures"].add(compile_key)
            for kind, key in referenced(_compile_meta(store, compile_key)).items():  # what its compile used
                if is_key(key):
                    self.keys[kind].add(key)
        if is_key(cell_key):
            self.keys["results"].add(cell_key)
            body = store.load_record("results", cell_key)
            try:
                result = None if body is None else CellResult.from_json(body)
            except (TypeError, ValueError):
                result = None
            if result is not None and is_key(result.artifact_key):
                self.keys["artifacts"].add(result.artifact_key)  # type: ignore[arg-type]


def _compile_meta(store: Store, key: str) -> dict[str, Any]:
    """A compile entry's metadata as it says ({} when there is none or it cannot be read). Not verified:
    gc only keeps more on its word, and a dry run must not remove a damaged entry as a lookup would."""
    try:
        record = json.loads(read_file(store.entry_path("compile", key) / ENTRY_FILE))  # bounded, no devices
    except (OSError, ValueError, RecursionError):
        return {}
    meta = record.get("meta") if isinstance(record, dict) else None
    return meta if isinstance(meta, dict) else {}


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).lstat().st_size
            except OSError:
                pass
    return total


def _manifest_cells(path: Path) -> dict[str, Any]:
    """The cells of the manifest at ``path`` ({} when there is none); gc removes nothing on the word
    of a manifest it cannot read, so anything else is an error naming the file. A release (its folder
    or its ``release.json``) is taken as what it is: the manifest records it carries for its cells."""
    hint = "gc removes nothing without it; rebuild it with rbln-build or drop the --keep"
    if path.is_dir() and (path / "release.json").is_file():
        path = path / "release.json"
    if absent(path, error=ConfigError, hint=hint):
        return {}
    data = load_json(path, error=ConfigError, hint=hint)
    if isinstance(data, dict) and "format" in data:
        return _release_cells(path, data)
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, dict) or not all(isinstance(e, dict) for e in cells.values()):
        raise ConfigError(f"{path}: not an rbln-build manifest (its 'cells' is not a mapping of entries); {hint}.")
    return cells


def _release_cells(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """A release's cells as manifest entries (each ``cells[id]["record"]``); a release that is not of
    this format, or whose self-hash does not match, is refused: gc keeps nothing less than it says."""
    from ..release import FORMAT, SELF_HASH_KEY, self_hash

    hint = "gc removes nothing on its word; check it with rbln-build verify or drop the --keep"
    if data.get("format") != FORMAT:
        raise ConfigError(
            f"{path}: format {data.get('format')!r} is neither a manifest nor a release ({FORMAT}); {hint}."
        )
    if data.get(SELF_HASH_KEY) != self_hash(data):
        raise ConfigError(f"{path}: a damaged release (its {SELF_HASH_KEY} does not match its content); {hint}.")
    cells = data.get("cells")
    records = (
        {cid: e.get("record") for cid, e in cells.items() if isinstance(e, dict)} if isinstance(cells, dict) else None
    )
    if records is None or len(records) != len(cells or {}) or not all(isinstance(r, dict) for r in records.values()):
        raise ConfigError(f"{path}: a release whose 'cells' are not records of manifest entries; {hint}.")
    return records


def plan_gc(
    build_dir: Path, cells: list[Any], keep: list[Path], shared: Path | None = None
) -> tuple[list[tuple[str, Path, int]], list[str]]:
    """What gc would remove: (what, path, bytes) rows, and notes (things left alone, and why).
    ``shared``: the cache is shared by several build dirs (``cache.dir``), so only links are removed."""
    store = Store(build_dir / "cache", warn=lambda message: None)
    kept = Kept()
    for manifest in [build_dir / "manifest.json", *keep]:
        if manifest != build_dir / "manifest.json" and absent(
            manifest, error=ConfigError, hint="give a manifest or a release to --keep"
        ):
            raise ConfigError(f"--keep {manifest}: no such manifest or release.")
        for cid, entry in _manifest_cells(manifest).items():
            kept.add_cell(store, cid, entry.get("compile_key"), entry.get("cell_key"))
    for cell in cells:
        kept.add_cell(store, cell.id, cell.compile_key, cell.cell_key, cell.spec)
    rows: list[tuple[str, Path, int]] = []
    notes: list[str] = []
    links = build_dir / "artifacts"
    if links.is_dir():
        for link in sorted(links.iterdir()):
            if link.name in kept.cell_ids or link.name.startswith(".tmp-"):
                continue
            if ours(link):
                rows.append(("link", link, _size(link)))
            else:
                notes.append(f"{link} is not a link rbln-build made; left alone")
    if shared is not None:
        notes.append(
            f"the cache {shared} is shared (cache.dir): its entries are left alone, other build dirs may use "
            "them; remove it as a whole when no build uses it"
        )
        return rows, notes
    for kind in ENTRY_KINDS:
        folder = store.root / kind
        if folder.is_dir():
            for path in sorted(folder.iterdir()):
                if is_key(path.name) and path.name not in kept.keys[kind]:
                    rows.append((kind, path, _size(path)))
    for kind in RECORD_KINDS:
        folder = store.root / kind
        if folder.is_dir():
            for path in sorted(folder.glob("*.json")):
                if is_key(path.stem) and path.stem not in kept.keys[kind]:
                    rows.append((kind, path, _size(path)))
            for path in sorted(folder.glob(f"*{PACK_SUFFIX}")):  # a pack goes once none of its cells is kept
                packed = read_pack(str(path), path.stem) if is_key(path.stem) else None
                if is_key(path.stem) and (packed is None or kept.keys[kind].isdisjoint(packed[0])):
                    rows.append((kind, path, _size(path)))
    folder = store.root / "index"  # a compile key's results index (_ledger) goes with its compile key
    if folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            if is_key(path.stem) and path.stem not in kept.keys["compile"]:
                rows.append(("index", path, _size(path)))
    return rows, notes


def _remove(what: str, path: Path, build_dir: Path) -> None:
    """Remove a link of ``artifacts/`` or a cache entry or record, after checking (resolved) that it
    lies there: nothing outside the build dir's own ``artifacts/`` and cache is ever removed."""
    real_build = build_dir.resolve()
    room = build_dir / ("artifacts" if what == "link" else "cache")
    real_room = room.resolve()
    where = path.parent.resolve() if path.is_symlink() else path.resolve()
    if real_build not in real_room.parents or (where != real_room and real_room not in where.parents):
        raise ConfigError(f"{path} resolves to {where}, outside {room} in {real_build}; gc removes nothing there.")
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        aside = path.parent / f".tmp-gc-{path.name}-{os.getpid()}"
        os.rename(path, aside)  # out of sight first: a half-removed entry is never looked up
        shutil.rmtree(aside, ignore_errors=True)


def main(argv: list[str]) -> int:
    from ..colocation import expand_all
    from ..config import check_contained
    from ..store import acquire_build_lock
    from ._build import compose

    if "--remote" in argv:  # the remote cache, by the manifests given (rbln_build.commands._gc_remote)
        from ._gc_remote import main as remote_main

        return remote_main([a for a in argv if a != "--remote"])
    dry = "--dry-run" in argv
    as_json = "--json" in argv
    keep: list[Path] = []
    args: list[str] = []
    it = iter(argv)
    for a in it:
        if a in ("--dry-run", "--json"):
            continue
        if a == "--keep":
            value = next(it, None)
            if value is None:
                raise ConfigError("--keep: expected a manifest path after it.")
            keep.append(Path(value))
        elif a.startswith("--keep="):
            keep.append(Path(a.split("=", 1)[1]))
        else:
            args.append(a)
    jobs = compose(args, prog="rbln-build gc")
    if jobs is None:
        return 0
    build_dir, cells = expand_all(jobs)
    if not build_dir.is_dir():
        print(f"rbln-build gc: {build_dir} does not exist; nothing to remove.")
        return 0
    shared = None if jobs[0].scale.cache_dir is None else Path(jobs[0].scale.cache_dir)
    check_contained(build_dir, shared)  # a cache or artifacts/ linked out is refused (exit 2)
    lock = acquire_build_lock(build_dir, "rbln-build gc")
    try:
        rows, notes = plan_gc(build_dir, cells, keep, shared)
        if not dry:
            for what, path, _n in rows:
                _remove(what, path, build_dir)
    finally:
        lock.release()
    freed = sum(n for _w, _p, n in rows)
    if as_json:
        print(
            json.dumps(
                {
                    "dry_run": dry,
                    "bytes": freed,
                    "notes": notes,
                    "removed": [
                        {"kind": w, "path": p.relative_to(build_dir).as_posix(), "bytes": n} for w, p, n in rows
                    ],
                },
                indent=2,
                sort_keys=True,
            )
        )
        return 0
    verb = "would remove" if dry else "removed"
    for what, path, n in rows:
        print(f"{verb} {what:9} {path.relative_to(build_dir).as_posix()}  ({n:,} bytes)")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    counts: dict[str, int] = {}
    for what, _p, _n in rows:
        counts[what] = counts.get(what, 0) + 1
    summary = ", ".join(f"{n} {w}" for w, n in sorted(counts.items())) or "nothing"
    print(f"{verb} {summary}: {freed:,} bytes{' (dry run: nothing removed)' if dry else ' freed'} in {build_dir}.")
    return 0
