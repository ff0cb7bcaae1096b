"""``shard=merge/N``: the manifest of a sharded build, written from the shards' results on the remote.

After its build, each shard (``shard=I/N``) puts its cells' result records on the remote cache in one
file (``<url>/shards/<digest>.json.gz``, ``store.shard_file``: named by I, N and the shard's cell keys),
listing only cells whose outcome is final and whose compile entry and artifact are on the remote.
The merge composes the same matrix, computes the same assignment (``config._shard``), reads those N
files, checks that every record belongs to its cell (its cell key and compile key) and writes
``manifest.json`` and ``summary.json`` exactly as a build of the whole matrix would: a manifest
entry is a function of the cell and its result alone (``pipeline.entry_for``). It downloads no
compile entry and no artifact, and compiles nothing: a compile key whose shard left no result is
named, with its shard, and the merge exits 1 without writing a manifest. The programs stay on the
remote; the merge's build dir holds no ``artifacts/`` links (a build of the same matrix with the
remote, or ``release``, fetches them).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

__all__ = ["merge"]


def merge(jobs: list[Any], build_dir: Path, cells: list[Any], outputs: Any) -> int:
    """The merge run (``shard=merge/N``) over ``cells``, the composed matrix. Returns the exit code."""
    from ...ci import write_ci_outputs
    from ...config import assign_shards, check_contained
    from ...errors import ConfigError
    from ...pipeline import MANIFEST_FILE, display_label, entry_for, render_manifest, write_summary
    from ...store import RemoteStore, acquire_build_lock, fetch_shard, shard_file, write_atomic

    started = time.perf_counter()
    scale = jobs[0].scale
    count = scale.shard[1]
    if any(j.deployment is not None for j in jobs):
        raise ConfigError(
            f"shard=merge/{count}: a deployment build plans from its compiled reports in one run; build it "
            "without shard=..."
        )
    cache_dir = None if scale.cache_dir is None else Path(scale.cache_dir)
    check_contained(build_dir, cache_dir)
    warnings: list[str] = []
    options = replace(scale.remote_options, mode="read")  # a merge only reads the remote
    store = RemoteStore(build_dir / "cache", str(scale.remote), warnings.append, True, options=options)
    store.probe()  # require: a remote it cannot read is a CacheError (exit 2), before anything else
    owner = assign_shards(cells, count)  # as every shard computes it (_build: select_shard)
    shards: dict[int, list[Any]] = {}
    for cell in cells:
        shards.setdefault(owner[cell.compile_key] if cell.compile_key is not None else 1, []).append(cell)
    rows: list[tuple[Any, Any]] = []
    missing: dict[Any, tuple[int, str, list[str]]] = {}
    moved = 0
    for index, mine in sorted(shards.items()):
        records, size = fetch_shard(store, shard_file((index, count), [c.cell_key for c in mine]))
        moved += size
        for cell in mine:
            result = _result(cell, (records or {}).get(cell.cell_key))
            if result is None:
                missing.setdefault(cell.compile_key, (index, display_label(cell), []))[2].append(cell.id)
            rows.append((cell, result))
    if missing:
        print(
            f"rbln-build: the merge found no result for {len(missing)} compile key(s) on {store.url}:", file=sys.stderr
        )
        for key, (index, label, ids) in sorted(missing.items(), key=lambda kv: (kv[1][0], str(kv[0]))):
            print(
                f"  shard {index}/{count}: compile key {key} ({label}), {len(ids)} cell(s) such as {ids[0]}",
                file=sys.stderr,
            )
        shards_left = sorted({index for index, _, _ in missing.values()})
        print(
            "rbln-build: a merge compiles nothing; run shard(s) "
            + ", ".join(f"{i}/{count}" for i in shards_left)
            + " again with the same cache.remote, then the merge.",
            file=sys.stderr,
        )
        return 1
    entries = [entry_for(cell, result) for cell, result in rows]
    try:
        lock = acquire_build_lock(build_dir)
    except OSError as exc:
        raise ConfigError(
            f"build_dir: cannot create or lock {build_dir} ({exc.strerror or exc}); choose a writable directory."
        ) from None
    try:
        write_atomic(build_dir / MANIFEST_FILE, render_manifest(entries))
        summary = write_summary(build_dir, entries, 0, set(), warnings)
    finally:
        lock.release()
    path = build_dir / MANIFEST_FILE
    written = write_ci_outputs(outputs, entries, summary, str(path))
    per_cell = moved / max(len(cells), 1)
    print(
        f"merge of {count} shard(s): {summary['cells']} cells, 0 compiled, {summary['failed']} failed; "
        f"{moved:,} bytes read from the remote ({per_cell:,.0f} a cell), no program downloaded "
        f"({time.perf_counter() - started:.1f}s). Manifest: {path}"
    )
    return 1 if summary["failed"] or not written else 0


def _result(cell: Any, body: Any) -> Any:
    """The shard's record of ``cell`` as a CellResult, if it is one and it is this cell's."""
    from ...store import CellResult

    if body is None:
        return None
    try:
        result = CellResult.from_json(body)
    except (TypeError, ValueError):
        return None
    if result.cell_key != cell.cell_key or result.compile_key != cell.compile_key:
        return None
    return result
