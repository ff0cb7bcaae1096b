"""One cache entry as a tar, the remote cache's unit (``_remote``): packed deterministically (sorted
members, fixed owners and times, so one entry always packs to the same bytes and the same blob name)
and unpacked defensively (tarfile's ``data`` filter, uncompressed only, bounded members and sizes).
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

from .._documents import sha256_file
from ._hashing import _files, content_hash
from ._keys import canonical_json
from ._store import ENTRY_FILE, ENTRY_SCHEMA, FILES_DIR, Entry, Store, program_problem

MAX_MEMBERS = 100_000  # files in one entry's tar


sha256_of = sha256_file  # the store's name for it (exported)


def _pack(entry: Entry, out: Path) -> None:
    """entry.json (without the local stat fingerprint) and files/, in sorted order with fixed owners and
    times, so one entry always packs to the same bytes (and the same blob name)."""
    record = {"schema": ENTRY_SCHEMA, "key": entry.key, "meta": entry.meta, "content_hash": entry.content_hash}
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        _add_bytes(tar, ENTRY_FILE, canonical_json(record).encode("utf-8"))
        for rel, path in _files(entry.files):
            info = tarfile.TarInfo(f"{FILES_DIR}/{rel}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_symlink():
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, str(path.readlink()), 0o777
                tar.addfile(info)
                continue
            info.size, info.mode = path.stat().st_size, 0o644
            with open(path, "rb") as f:
                tar.addfile(info, f)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uname, info.gname = len(data), 0, 0o644, "", ""
    tar.addfile(info, io.BytesIO(data))


def _unpack(packed: Path, dest: Path, key: str) -> dict[str, Any] | None:
    """Extract into ``dest`` (tarfile's ``data`` filter: nothing outside it, no devices, no absolute
    links; an uncompressed tar only, whose files add up to no more than the tar's own size); the
    entry's metadata, or None when the tar is not an entry for ``key``."""
    try:
        with tarfile.open(packed, "r:") as tar:  # uncompressed only: a gzip/bz2/xz blob is refused unread
            members = tar.getmembers()
            unpacked = sum(m.size for m in members if m.isreg())
            if len(members) > MAX_MEMBERS or unpacked > packed.stat().st_size or any(m.issparse() for m in members):
                return None  # more than the tar holds (sparse members), or absurdly many files
            tar.extractall(dest, members=members, filter="data")
        record = json.loads((dest / ENTRY_FILE).read_bytes())
        if record.get("key") != key or record.get("schema") != ENTRY_SCHEMA or not isinstance(record.get("meta"), dict):
            return None
        (dest / FILES_DIR).mkdir(exist_ok=True)
        return record["meta"]  # type: ignore[no-any-return]
    except (OSError, tarfile.TarError, ValueError, KeyError, RecursionError):
        return None


def _install(store: Store, kind: str, key: str, packed: Path, tmp: Path, recorded: str | None) -> Entry | str:
    """Unpack ``packed`` into ``tmp`` and, if its files and metadata hash to ``recorded`` and its
    programs check out as data (``program_problem``), make it the local entry (never uploaded again:
    it came from elsewhere). Otherwise the reason it was refused."""
    meta = _unpack(packed, tmp, key)
    if meta is None or content_hash(tmp / FILES_DIR, meta) != recorded:
        return f"its files do not match the recorded content hash {recorded}"
    problem = program_problem(tmp / FILES_DIR)
    if problem is not None:
        return problem

    def fill(files: Path) -> dict[str, Any]:
        files.rmdir()
        shutil.move(str(tmp / FILES_DIR), str(files))
        return meta

    return Store.put(store, kind, key, fill)


def pack_entry(entry: Entry, path: Path) -> bytes:
    """The entry as tar bytes (what a Ray task sends back to the driver)."""
    _pack(entry, path)
    try:
        return path.read_bytes()
    finally:
        path.unlink(missing_ok=True)


def install_packed(store: Store, kind: str, key: str, data: bytes, recorded: str | None) -> bool:
    """Install an entry sent as tar bytes into ``store`` after verifying its content hash."""
    tmp = store._tmp(store.entry_path(kind, key))
    tmp.parent.mkdir(parents=True, exist_ok=True)
    packed = tmp.with_name(tmp.name + ".tar")
    try:
        packed.write_bytes(data)
        installed = _install(store, kind, key, packed, tmp, recorded)
        if isinstance(installed, str):
            store.warn(f"entry {kind}/{key} sent by a worker was refused: {installed}")
            return False
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        packed.unlink(missing_ok=True)
