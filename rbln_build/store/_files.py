"""Writing a file whole: to a temporary name in the same folder, then a rename (``write_atomic``),
so readers see the old file or the new one and a killed writer leaves only a ``.tmp-*`` name, which
the Store's start-up clean-up removes (``Store.clean_temporaries``).

A temporary name is ``.tmp-<name>-[<owner>-]<pid>-<random>``: the owner tag names the build dir that
made it in a shared cache, so each build dir removes only its own leftovers there.

**Record packs**: the results of a batch of cells in one file, ``cache/results/<pack key>.pack``.

A sweep's workers return their cells in batches, and the scheduler used to write each cell's record
as a file of its own: 10,008 files for a 10,008-cell sweep, whose creation was most of what the
build process did while the workers ran (measured: a fresh 10,008-cell build with no records written
took 2.95 s against 3.40 s, four runs of each alternated). So the scheduler writes each batch's
records as one pack per compile key (``Parallel``; ``execution._recording.record_batch``) instead.

A pack is the batch's records, each exactly the bytes of a record file (``render_record``), one per
line, in the batch's order. Its name is the sha256 of its bytes, so a pack verifies as a whole
before any line of it is read (like a Store entry), and each line verifies as a record does (its
own content hash and key). A pack is written whole, through a temporary name and a rename, like a
record; a killed run loses at most the batch it was writing, which the next run redoes.

Where a cell's record is, in order:

1. its record file, ``cache/results/<cell key>.json`` (a build without workers, or a shared cache,
   still writes those; a cell recorded in a pack has its older record file removed);
2. its compile key's results index, which names the pack and keeps the pack's fingerprint
   (``execution._index``: the survey takes the body from there while the pack is untouched);
3. a scan of every pack (``PackedRecords``), once per Store object, only when a record is looked
   for that neither of the above has (a run killed before its indexes were written, an index
   removed). When two packs hold one cell (it was redone), the newer one's record counts.

A pack that does not verify is reported, removed and its cells are redone; a line that does not
verify is reported and its cell redone. ``gc`` keeps a pack while any of its cells is kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .._documents import read_file
from ._hashing import record_body

__all__ = ["write_atomic", "write_record", "PACK_SUFFIX", "render_pack", "write_pack", "PackedRecords", "read_pack"]


def _tmp_name(final: Path, owner: str = "") -> Path:
    """``.tmp-<name>-[<owner>-]<pid>-<random>``: the owner tag names the build dir that made it (a
    shared cache), so start-up clean-up removes only its own build dir's leftovers there."""
    tag = f"{owner}-" if owner else ""
    return final.parent / f".tmp-{final.name}-{tag}{os.getpid()}-{uuid.uuid4().hex[:8]}"


def write_atomic(path: Path, data: bytes, owner: str = "", durable: bool = True) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder, then rename (readers see the
    old file or the new one, whole). ``durable``: fsync before the rename. A cell's record is not
    (``write_record``): a damaged one fails its content hash and is redone (``load_record``), and an
    fsync per cell was most of a 10,000-cell sweep's writing time."""
    _write_via(os.fspath(_tmp_name(path, owner)), os.fspath(path), data, durable)


_TOKEN = ""  # this process's random part of a record's temporary name (``write_record``)
_COUNT = itertools.count()


def write_record(path: str, data: bytes, owner: str) -> None:
    """``write_atomic(path, data, owner, durable=False)`` with less per call, for a cell's record (a
    sweep writes 10,000): the temporary name has the same shape, its random part drawn once per
    process and counted on, made from strings rather than paths."""
    global _TOKEN
    pid = os.getpid()
    if not _TOKEN.startswith(f"{pid}-"):  # a forked child draws its own
        _TOKEN = f"{pid}-{uuid.uuid4().hex[:6]}"
    folder, name = os.path.split(path)
    tag = f"{owner}-" if owner else ""
    _write_via(os.path.join(folder, f".tmp-{name}-{tag}{_TOKEN}{next(_COUNT):x}"), path, data, False)


def _write_via(tmp: str, path: str, data: bytes, durable: bool) -> None:
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    done = False
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        done = True
    finally:
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


PACK_SUFFIX = ".pack"


def pack_name(key: str) -> str:
    return f"{key}{PACK_SUFFIX}"


def render_pack(records: Iterable[bytes]) -> tuple[str, bytes]:
    """(pack key, bytes): the records one per line; the key is the sha256 of the bytes."""
    data = b"".join(record + b"\n" for record in records)
    return hashlib.sha256(data).hexdigest(), data


def write_pack(folder: str, records: Iterable[bytes], owner: str = "") -> tuple[str, list[int] | None]:
    """Write the records as one pack in ``folder``; (its key, its fingerprint as written or None)."""
    key, data = render_pack(records)
    path = os.path.join(folder, pack_name(key))
    write_record(path, data, owner)
    try:
        st = os.stat(path)
    except OSError:
        return key, None
    return key, [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def read_pack(path: str, key: str) -> tuple[dict[str, dict[str, Any]], list[str]] | None:
    """The pack's records (cell key -> body) and the problems of lines that do not verify; None when
    the pack as a whole does not (unreadable, or its bytes do not hash to its name)."""
    try:
        data = read_file(path)  # a FIFO or a device there is damaged, never waited on
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != key:
        return None
    bodies: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for number, line in enumerate(data.splitlines(), 1):
        try:
            record = json.loads(line)
            body, cell_key = record_body(record), record["key"]
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            problems.append(f"line {number}: {exc}")
            continue
        bodies[cell_key] = body
    return bodies, problems


class PackedRecords:
    """Every pack of one results folder, scanned once (on the first look-up), newest last."""

    def __init__(self, folder: str, is_key: Callable[[object], bool]) -> None:
        self.folder = folder
        self.is_key = is_key
        self.bodies: dict[str, tuple[str, dict[str, Any]]] | None = None  # cell key -> (pack key, body)
        self.bad: list[tuple[str, str]] = []  # (pack path, why) found by the scan
        self.dropped: set[str] = set()  # cell keys whose record was found forged: never given again

    def scan(self) -> dict[str, tuple[str, dict[str, Any]]]:
        if self.bodies is not None:
            return self.bodies
        self.bad = []
        found: list[tuple[int, str, str]] = []
        try:
            with os.scandir(self.folder) as it:
                for item in it:
                    key = item.name[: -len(PACK_SUFFIX)]
                    if item.name.endswith(PACK_SUFFIX) and self.is_key(key):
                        try:
                            found.append((item.stat(follow_symlinks=False).st_mtime_ns, key, item.path))
                        except OSError:
                            continue
        except OSError:
            pass
        bodies: dict[str, tuple[str, dict[str, Any]]] = {}
        for _mtime, key, path in sorted(found):  # newer packs last: their records count
            read = read_pack(path, key)
            if read is None:
                self.bad.append((path, "unreadable, or its bytes do not hash to its name"))
                continue
            records, problems = read
            self.bad.extend((path, problem) for problem in problems)
            for cell_key, body in records.items():
                bodies[cell_key] = (key, body)
        self.bodies = bodies
        return bodies

    def get(self, cell_key: str) -> tuple[str, dict[str, Any]] | None:
        """(pack key, body) of the cell's newest packed record, or None."""
        if cell_key in self.dropped:
            return None
        return self.scan().get(cell_key)

    def added(self, cell_keys: Iterable[str]) -> None:
        """This process wrote a pack of these cells: they count again, and the next look-up scans anew."""
        self.dropped.difference_update(cell_keys)
        self.bodies = None
