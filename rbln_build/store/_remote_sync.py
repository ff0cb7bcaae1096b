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

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from .._documents import read_file
from ._files import write_atomic
from ._remote import REMOTE_KINDS, RemoteStore
from ._store import Store

__all__ = ["upload_missing", "known_file"]


def known_file(store: RemoteStore) -> Path:
    return store.root / f"remote-{hashlib.sha256(store.url.encode()).hexdigest()[:16]}.json"


def _known(path: Path) -> set[str]:
    try:
        data = json.loads(read_file(path))
        return {x for x in data if isinstance(x, str)} if isinstance(data, list) else set()
    except (OSError, ValueError, RecursionError):
        return set()


def upload_missing(store: RemoteStore, keys: Iterable[tuple[str, str]]) -> int:
    """Upload each (kind, key) of ``keys`` that is held locally and whose remote pointer is missing.
    Returns the number uploaded. An unreachable remote is reported once (as every remote failure is)
    and ends the pass."""
    if store.down or not store.options.writes:  # cache.remote_mode=read never writes
        return 0
    path = known_file(store)
    known = _known(path)
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
            uploaded += key in store.uploaded  # else someone published it meanwhile: it is there too
        known.add(name)
    if len(known) != before:
        try:
            write_atomic(path, json.dumps(sorted(known)).encode("utf-8"))
        except OSError:
            pass  # a hint only
    return uploaded
