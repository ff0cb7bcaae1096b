"""A cell's record read without changing the Store, and the results index of each compile key.

**Results index.** A cell's result lives in its record (``cache/results/<cell key>.json``, the
ground truth, written by whichever process built the cell). Reading 10,000 small records costs more
than everything else a no-op does, so each compile key gets an index (while the workers build,
once its last cell is recorded: ``IndexWhileBuilding``; else at the end of the run),
``cache/index/<compile key>.json``: every cell result of that key in the run, each with its
record's file fingerprint (size, mtime, ctime, inode, as the Store's entries keep for their files).
The survey stats a record and takes the body from the index when the fingerprint matches; any
rewrite of the record (ctime cannot be set from user space) sends it to the record itself. A cell
whose record is in a pack (``store._files``, record packs) has the pack's key in place of a fingerprint, and the
index keeps each such pack's fingerprint once (``packs``): while the pack is untouched, the body is
the index's. The index is self-hashed (a damaged one is ignored, never trusted) and only ever saves reads: without it, or
for cells it does not cover, the records are read as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from .._documents import read_file
from ..store import CellResult, Store, canonical_json, is_key, record_body, write_atomic

if TYPE_CHECKING:
    from ..config import Cell
    from ._ledger import Ledger

__all__ = [
    "INDEX_KIND",
    "FIELDS",
    "IndexWhileBuilding",
    "fingerprint",
    "read_record",
    "read_index",
    "write_index",
    "index_cells",
    "index_key",
]

INDEX_KIND = "index"  # cache/index/<compile key>.json
INDEX_MAGIC = b"rbln-build-index 1 sha256:"


def fingerprint(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def read_record(store: Store, kind: str, key: str) -> dict[str, Any] | None:
    """A record's body if it is there and intact (its file, else the newest pack holding it),
    read-only (Store.load_record removes a damaged one)."""
    try:
        return record_body(json.loads(read_file(store.record_path(kind, key))), key)  # type: ignore[no-any-return]
    except FileNotFoundError:
        return store.packed_record(key, read_only=True)[1] if kind == "results" else None
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


# cell key -> (its record's fingerprint or its pack's key, its result) for the records this process
# wrote (``remember``; the scheduler records what the workers built): ``index_cells`` indexes a redone
# cell from here, with the fingerprint its record had when written, instead of reading it back.
RECORDED: dict[str, tuple[list[int] | str, CellResult]] = {}


def remember(result: CellResult, recorded: list[int] | str) -> None:
    """The record of ``result`` was written with the fingerprint ``recorded``, or into the pack
    whose key is ``recorded``."""
    RECORDED[result.cell_key] = (recorded, result)


def pack_holds(store: Store, key: str, recorded: Any) -> bool:
    """The pack ``key`` is there with the fingerprint ``recorded`` (an index's): its records stand as
    indexed (any rewrite changes its ctime or inode; a pack is never rewritten in place)."""
    return is_key(key) and isinstance(recorded, list) and fingerprint(store.pack_path(key)) == recorded


def _index_path(store: Store, key: str) -> str:
    return os.path.join(store.root, INDEX_KIND, f"{key}.json")


# The index is a table: per cell key, its record's fingerprint and its result's fields in FIELDS
# order, where the fields that repeat across a key's cells (artifacts, the floor and full-pool
# answers, error messages) are numbers into one list of distinct values. 10,000 cells parse in a
# fraction of the time their full JSON bodies would take.
FIELDS = tuple(f for f in CellResult.__dataclass_fields__ if f not in ("cell_key", "compile_key"))
SHARED = frozenset(
    (
        "produced",
        "budget_for_floor",
        "budget_for_full_pool",
        "warnings",
        "artifact_key",
        "artifact_hash",
        "error",
        "error_kind",
    )
)


def read_index(store: Store, key: str) -> dict[str, tuple[Any, dict[str, Any]]]:
    """cell key -> (record fingerprint, result body) from the compile key's index; {} when there is
    none or it does not verify (it is only a cache of the records). A packed cell's fingerprint is
    its pack's key, whose pack holds as indexed (``pack_holds``), else None (the survey reads it)."""
    if not is_key(key):
        return {}
    try:
        data = read_file(_index_path(store, key))
    except OSError:
        return {}
    header, _, body = data.partition(b"\n")
    if header != INDEX_MAGIC + hashlib.sha256(body).hexdigest().encode():
        return {}
    try:
        index = json.loads(body)
        if index["key"] != key or index["fields"] != list(FIELDS):
            return {}
        values = index["values"]
        shared = [name in SHARED for name in FIELDS]
        packs = {p: pack_holds(store, p, recorded) for p, recorded in index.get("packs", {}).items()}
        out = {}
        for cell_key, (stat, row) in index["cells"].items():
            if isinstance(stat, str) and not packs.get(stat):
                stat = None  # its pack changed or is gone: not from here
            result = {"cell_key": cell_key, "compile_key": key}
            for name, is_shared, value in zip(FIELDS, shared, row, strict=True):
                result[name] = values[value] if is_shared else value
            out[cell_key] = (stat, result)
        return out
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
        return {}


def write_index(store: Store, key: str, cells: dict[str, tuple[list[int] | str, CellResult]]) -> bool:
    """Write the compile key's index (cell key -> (record fingerprint or pack key, result)). A
    failure to write is no error: the index only saves reads. Returns whether it wrote."""
    if not is_key(key):
        return False
    values: list[Any] = []
    seen: dict[tuple[type, Any], int] = {}
    same: dict[int, tuple[Any, int]] = {}  # id(value) -> (value, its number): a value object met before

    def ref(value: Any) -> int:
        # One object is one value: the cells of a batch share their answers' objects, so most
        # values are numbered by identity (the value is kept in ``same``, so its id stays its own).
        # Equal reprs are equal JSON values (the same keys in the same order, each value's repr alike),
        # so they share one entry; a repr costs a fraction of a canonical rendering. Values equal
        # only up to key order get an entry each, which is no error: it is only a table.
        known = same.get(id(value))
        if known is not None:
            return known[1]
        text = (type(value), value if value is None or isinstance(value, str) else repr(value))
        number = seen.get(text)
        if number is None:
            number = seen[text] = len(values)
            values.append(value)
        same[id(value)] = (value, number)
        return number

    rows = {}
    packs: dict[str, list[int]] = {}
    for cell_key, (stat, result) in sorted(cells.items()):
        if result.cell_key != cell_key or result.compile_key != key:
            continue  # not this key's: never indexed under it
        if isinstance(stat, str):  # in a pack: indexed with the pack's fingerprint, or not at all
            if stat not in packs:
                pack = fingerprint(store.pack_path(stat)) if is_key(stat) else None
                if pack is None:
                    continue
                packs[stat] = pack
        # the result's own values, not copies (``to_json``): a tuple renders as the list it stands for
        rows[cell_key] = [
            stat,
            [ref(getattr(result, name)) if name in SHARED else getattr(result, name) for name in FIELDS],
        ]
    index = {"key": key, "fields": list(FIELDS), "values": values, "cells": rows}
    if packs:
        index["packs"] = packs
    body = canonical_json(index).encode("utf-8")
    try:
        # not durable (no fsync): like a cell's record, a damaged index fails its hash and is not used
        write_atomic(
            store.root / INDEX_KIND / f"{key}.json",
            INDEX_MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body,
            durable=False,
        )
    except OSError:
        return False
    return True


def index_cells(ledger: Ledger, store: Store, cells: list[Cell], done: Collection[str] = ()) -> int:
    """After a run: write each compile key's index from its cells' records (the ones that stood, as
    the survey read them; the ones redone, as recorded now). A key whose cells all stood, read from
    its index as it is, is not rewritten (a no-op writes nothing), nor is one in ``done`` (written
    while the workers built: ``IndexWhileBuilding``). Returns how many it wrote."""
    written = 0
    for key, members in _groups(cells).items():
        if key not in done:
            written += index_key(ledger, store, key, members)
    return written


def _groups(cells: list[Cell]) -> dict[str, list[Cell]]:
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        if cell.compile_key is not None:
            groups.setdefault(cell.compile_key, []).append(cell)
    return groups


def index_key(ledger: Ledger, store: Store, key: str, members: list[Cell]) -> bool:
    """Write the index of compile key ``key`` from its cells ``members`` (``index_cells``); whether it wrote."""
    previous = ledger.indexed.get(key, {})
    if len(previous) == len(members) and all(
        c.id in ledger.standing and c.cell_key in ledger.from_index for c in members
    ):
        return False  # the index is exactly these cells, as they stand
    records = os.path.join(store.root, "results")
    entries: dict[str, tuple[list[int] | str, CellResult]] = {}
    for cell in members:
        if cell.id in ledger.standing:
            stat = ledger.fingerprints.get(cell.cell_key)
            result = ledger.stored.get(cell.id)
            if stat is not None and result is not None:
                entries[cell.cell_key] = (stat, result)
            continue
        # redone this run: index what its record holds now (the record stays the ground truth)
        mine = RECORDED.get(cell.cell_key)
        if mine is not None:
            # The record as this run wrote it, with the fingerprint it had then: no need to stat it
            # again, since the survey compares that fingerprint with the file's and reads a record
            # that changed since (any rewrite changes its ctime or inode).
            entries[cell.cell_key] = mine
            continue
        path = os.path.join(records, f"{cell.cell_key}.json")
        stat = fingerprint(path)
        body = read_record(store, "results", cell.cell_key) if stat is not None else None
        if body is not None and stat is not None and stat == fingerprint(path):
            try:
                entries[cell.cell_key] = (stat, CellResult.from_json(body))
            except (TypeError, ValueError):
                pass  # not a result: the survey reads (and judges) the record itself
    return write_index(store, key, entries)


class IndexWhileBuilding:
    """Each compile key's index, written by a thread of its own once the last of the key's cells
    that this run builds is recorded (the scheduler hands over each recorded batch,
    ``Parallel.recorded``), instead of all of them after the workers are done, when the build
    waited for them (0.3-0.45 s of a fresh 10,008-cell sweep, on one core beside the manifest).
    Such a key's cells are not recorded again in the run, so its index is what ``index_cells``
    would write then; ``written`` names the keys done (``index_cells(done=...)`` skips them). An
    index is only a cache of the records: one written before the run is killed is checked as any."""

    def __init__(self, ledger: Ledger, store: Store, cells: list[Cell]) -> None:
        self.ledger, self.store = ledger, store
        self.groups = _groups(cells)
        # compile key -> the ids of its cells still to be recorded in this run
        self.left = {
            key: todo for key, members in self.groups.items() if (todo := {c.id for c in members} - ledger.standing)
        }
        self.written: set[str] = set()
        self._keys: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def add(self, cells: list[Cell], results: list[CellResult]) -> None:
        """A batch of ``cells`` was recorded (its ``results``: as recorded, unused here)."""
        for cell in cells:
            left = self.left.get(cell.compile_key)  # type: ignore[arg-type]
            if left is None:
                continue
            left.discard(cell.id)
            if not left:
                del self.left[cell.compile_key]  # type: ignore[arg-type]
                if self._thread is None:
                    self._thread = threading.Thread(target=self._work, name="rbln-build-index", daemon=True)
                    self._thread.start()
                self._keys.put(cell.compile_key)

    def _work(self) -> None:
        while (key := self._keys.get()) is not None:
            try:
                if index_key(self.ledger, self.store, key, self.groups[key]):
                    self.written.add(key)
            except Exception:  # a cache only: the publish step writes it again
                continue

    def close(self) -> None:
        """Wait for the indexes handed over."""
        if self._thread is not None:
            self._keys.put(None)
            self._thread.join()
            self._thread = None
