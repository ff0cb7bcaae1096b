"""Writing a file whole: to a temporary name in the same folder, then a rename (``write_atomic``),
so readers see the old file or the new one and a killed writer leaves only a ``.tmp-*`` name, which
the Store's start-up clean-up removes (``Store.clean_temporaries``).

A temporary name is ``.tmp-<name>-[<owner>-]<pid>-<random>``: the owner tag names the build dir that
made it in a shared cache, so each build dir removes only its own leftovers there.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import uuid
from pathlib import Path

__all__ = ["write_atomic", "write_record"]


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
