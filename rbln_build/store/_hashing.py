"""What an entry's hashes are: ``content_hash`` (sha256 over its files in sorted relative-path order,
each preceded by its name and size, then its metadata as canonical JSON), ``file_stats`` (each
file's size, mtime, ctime and inode: the no-op fast path), and the hashes of metadata and records."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from .._documents import hash_stream
from ._keys import canonical_json

__all__ = ["content_hash", "file_stats", "meta_hash", "result_hash"]


def _walk(root: str, prefix: str, out: list[tuple[str, str]]) -> None:
    try:
        it = os.scandir(root)
    except (FileNotFoundError, NotADirectoryError):
        return
    with it:
        for e in it:
            if e.is_dir(follow_symlinks=False):
                _walk(e.path, f"{prefix}{e.name}/", out)
            elif e.is_file() or e.is_symlink():  # a symlink (to anything) counts as a file, not followed into
                out.append((prefix + e.name, e.path))


def _file_paths(root: Path) -> list[tuple[str, str]]:
    """(relative posix path, path) of every file and symlink under ``root``, sorted (os.scandir:
    this runs for every entry a no-op verifies)."""
    out: list[tuple[str, str]] = []
    _walk(os.fspath(root), "", out)
    return sorted(out)


def _files(root: Path) -> list[tuple[str, Path]]:
    return [(rel, Path(path)) for rel, path in _file_paths(root)]


def content_hash(files_dir: Path, meta: dict[str, Any]) -> str:
    h = hashlib.sha256()
    for rel, path in _files(files_dir):
        h.update(rel.encode("utf-8") + b"\0" + str(path.stat().st_size).encode() + b"\0")
        # O_NONBLOCK: a FIFO (or a link to one) is opened without waiting for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a device or a pipe is never read: a marker instead
                h.update(b"\0not a regular file\0")  # (an entry we make holds none, so it never verifies)
                continue
            hash_stream(h, f)
    h.update(b"\0meta\0" + canonical_json(meta).encode("utf-8"))
    return "sha256:" + h.hexdigest()


def file_stats(files_dir: Path) -> dict[str, list[int]]:
    out = {}
    for rel, path in _file_paths(files_dir):
        st = os.stat(path)
        out[rel] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    return out


def meta_hash(meta: Any) -> str:
    """The fast path re-hashes the metadata alone (the files are vouched for by their stat)."""
    return hashlib.sha256(canonical_json(meta).encode("utf-8")).hexdigest()


def result_hash(body: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def record_body(record: Any, key: str | None = None) -> Any:
    """The result body of a parsed record (``render_record``'s: a file of its own or a pack's line),
    once it verifies: its key is a string (``key``, when the reader asked for that one) and its
    content hash is the body's. Raises ValueError, KeyError or TypeError when it does not. The one
    check of every reader: ``Store.load_record``, ``_index.read_record``, ``_files.read_pack``."""
    body = record["result"]
    found = record["key"]
    if not isinstance(found, str) or (key is not None and found != key) or record["content_hash"] != result_hash(body):
        raise ValueError("hash or key does not match")
    return body
