"""Entries held locally but missing on the remote cache are uploaded by the next run.

An upload happens when an entry is made (``RemoteStore.put``). If that upload never finished (the
build was killed midway, or the remote was down), the entry is complete locally and every later
lookup is a local hit, so nothing would ever upload it and every other machine would recompile that
key. ``upload_missing`` closes the gap: after a build, for each compile entry and artifact the build
uses, it asks the remote whether the entry's pointer is there and uploads the entry if it is not.

So that a no-op build does not ask the remote about every key again, what is known to be on the
remote is remembered in ``<cache>/remote-<digest of the URL>.json`` (a sorted list of
``kind/key``, written atomically): a key is asked about once per remote. The file is a hint, never
trusted for anything else: a lost or damaged one costs one question per key.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import uuid
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._documents import read_file
from ..errors import CacheError
from ._files import write_atomic
from ._keys import canonical_json
from ._remote import REMOTE_KINDS, RemoteStore, _forget, _makedirs, _publish
from ._remote_io import with_retries
from ._result import CellResult
from ._store import Store, is_key

__all__ = [
    "upload_missing",
    "known_file",
    "sync_after_build",
    "shard_file",
    "fetch_shard",
    "decode_shard",
    "SHARDS_DIR",
    "MAX_SHARD_BYTES",
]

SHARDS_DIR = "shards"  # <url>/shards/<digest>.json.gz: one shard's cell results, what the merge reads
MAX_SHARD_BYTES = 1 << 30  # ~600 bytes a cell: far more cells than any matrix


def known_file(store: RemoteStore) -> Path:
    return store.root / f"remote-{hashlib.sha256(store.url.encode()).hexdigest()[:16]}.json"


def _known(path: Path) -> set[str]:
    try:
        data = json.loads(read_file(path))
        return {x for x in data if isinstance(x, str)} if isinstance(data, list) else set()
    except (OSError, ValueError, RecursionError):
        return set()


def upload_missing(store: RemoteStore, keys: Iterable[tuple[str, str]], known: set[str] | None = None) -> int:
    """Upload each (kind, key) of ``keys`` that is held locally and whose remote pointer is missing.
    Returns the number uploaded; ``known`` (when given) gains every ``kind/key`` now known to be on
    the remote. An unreachable remote is reported once (as every remote failure is) and ends the pass."""
    known = set() if known is None else known
    if store.down or not store.options.writes:  # cache.remote_mode=read never writes
        return 0
    path = known_file(store)
    known.update(_known(path))
    before = len(known)
    uploaded = 0
    for kind, key in keys:
        name = f"{kind}/{key}"
        if kind not in REMOTE_KINDS or name in known:
            continue
        entry = Store.lookup(store, kind, key)  # local only
        if entry is None:
            continue
        try:
            fs, base = store._filesystem()
            there = store._call(fs.exists, f"{base}/{kind}/{key}")  # bounded, as every remote call
        except Exception as exc:  # the remote is down or refuses us
            store._unreachable(exc)
            break
        if not there:
            store._upload(kind, entry)
            if store.down:
                break
            if key not in store.uploaded and f"{kind}/{key}" in store.failed:
                continue  # its upload failed every retry: not there
            uploaded += key in store.uploaded  # else someone published it meanwhile: it is there too
        known.add(name)
    if len(known) != before:
        try:
            write_atomic(path, json.dumps(sorted(known)).encode("utf-8"))
        except OSError:
            pass  # a hint only
    return uploaded


def sync_after_build(
    store: Store, compile_keys: list[str], cells: list[tuple[str, str | None]], shard: tuple[int, int] | None
) -> list[str]:
    """After a build with a remote cache: upload what it uses that is local only (``upload_missing``)
    and, for a shard (``shard=I/N``), publish its cells' results for the merge (``shard_file``).
    ``cells``: (cell key, compile key). Returns what to tell the user; a line starting with
    ``cache.remote:`` belongs in the run's summary (the keys a remote turned off left behind)."""
    if not isinstance(store, RemoteStore):
        return []
    keys = [("compile", key) for key in compile_keys]
    results: dict[str, CellResult] = {}
    for cell_key, _ in cells:
        try:
            results[cell_key] = CellResult.from_json(Store.load_record(store, "results", cell_key))
        except (TypeError, ValueError):
            continue  # no record (not built): nothing of it to upload
        artifact = results[cell_key].artifact_key
        if artifact is not None and is_key(artifact):
            keys.append(("artifacts", artifact))
    known: set[str] = set()
    count = upload_missing(store, keys, known)
    lines = [f"uploaded {count} cache entr{'y' if count == 1 else 'ies'} the remote cache lacked"] if count else []
    missing = sorted({f"{k}/{key}" for k, key in keys} - known) if store.options.writes else []
    if store.down and missing:
        lines.append(
            f"cache.remote: {store.url} was off for this run; {len(missing)} of {len(set(keys))} cache entries "
            "this build uses are not on it (the next run that reaches it uploads them)"
        )
    if shard is None or store.down:
        return lines
    ready = {
        cell_key: result.to_json()
        for cell_key, result in results.items()
        if (result.error is None or not result.retry)
        and (result.artifact_key is None or f"artifacts/{result.artifact_key}" in known)
        and (result.error is not None or f"compile/{result.compile_key}" in known)
    }
    name = shard_file(shard, [c for c, _ in cells])
    try:
        fs, base = store._filesystem()
        # gzip (no name, no time: the same results give the same bytes): records repeat their field names
        data = gzip.compress(canonical_json({"results": ready, "schema": 1}).encode("utf-8"), mtime=0)
        with_retries(lambda: _put_whole(store, fs, base, name, data))
    except Exception as exc:
        store._unreachable(exc)
        return lines
    if len(ready) < len(cells):
        lines.append(
            f"shard {shard[0]}/{shard[1]}: {len(cells) - len(ready)} of {len(cells)} cells have no result on the "
            "remote yet (failed or not uploaded); the merge names them: run this shard again"
        )
    return lines


def shard_file(shard: tuple[int, int], cell_keys: Iterable[str]) -> str:
    """Where shard I/N of a matrix leaves its results: named by I, N and its cells' keys, so every
    shard and the merge compute it from the matrix alone, and another matrix never reads it."""
    body = canonical_json({"cells": sorted(set(cell_keys)), "shard": list(shard)}).encode("utf-8")
    return f"{SHARDS_DIR}/{hashlib.sha256(body).hexdigest()}.json.gz"


def fetch_shard(store: RemoteStore, name: str) -> tuple[dict[str, Any] | None, int]:
    """(cell key -> result record, bytes read) of one shard file; (None, 0) when it is not there.
    Raises CacheError for a file that is not one (too large, not JSON); remote errors propagate."""
    fs, base = store._filesystem()
    try:
        raw = with_retries(lambda: store._call(fs.cat_file, f"{base}/{name}", start=0, end=MAX_SHARD_BYTES + 1))
    except FileNotFoundError:
        return None, 0
    try:
        results = decode_shard(raw)
    except ValueError as exc:
        raise CacheError(f"{store.url}/{name}: not a shard's results ({exc}); run that shard again") from None
    return results, len(raw)


def decode_shard(raw: bytes) -> dict[str, Any]:
    """cell key -> result record of a shard file's bytes (read with at most MAX_SHARD_BYTES + 1);
    ValueError for what is not one."""
    try:
        if len(raw) > MAX_SHARD_BYTES:
            raise ValueError(f"over {MAX_SHARD_BYTES} bytes")
        unpacker = zlib.decompressobj(wbits=31)  # gzip, bounded: a small file cannot unpack to gigabytes
        text = unpacker.decompress(raw, MAX_SHARD_BYTES + 1)
        if len(text) > MAX_SHARD_BYTES or not unpacker.eof:
            raise ValueError(f"not a whole gzip stream of at most {MAX_SHARD_BYTES} bytes")
        results = json.loads(text)["results"]
        if not isinstance(results, dict):
            raise ValueError("no results object")
    except (KeyError, TypeError, RecursionError, zlib.error) as exc:
        raise ValueError(str(exc) or type(exc).__name__) from None
    return results


def _put_whole(store: RemoteStore, fs: Any, base: str, name: str, data: bytes) -> None:
    """Write ``name`` whole or not at all: to ``tmp/`` first, then moved (a shard run again replaces its file)."""
    staged = f"{base}/tmp/{uuid.uuid4().hex}"
    store._call(_makedirs, fs, f"{base}/tmp")
    try:
        store._call(fs.pipe_file, staged, data)
        store._call(_publish, fs, staged, f"{base}/{name}")
    except BaseException:
        _forget(fs, staged)
        raise
