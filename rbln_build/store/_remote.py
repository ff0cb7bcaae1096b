"""A shared remote cache behind the build directory's Store (``cache.remote=<fsspec URL>``).

``RemoteStore`` is a ``Store`` whose compile entries and artifacts have a second level: a miss in
``<build_dir>/cache`` is looked up remotely before anything is compiled, and every entry the build
makes is uploaded after it is made. Records (cell results, failures) stay local: they are cheap to
redo from the entries. Layout under the URL::

    blobs/<sha256>            one entry packed as a tar (entry.json + files/), named by its digest
    compile/<compile key>     a pointer: {"blob": "<sha256>", "content_hash": "sha256:..."}
    artifacts/<artifact key>  likewise
    tmp/<random>              uploads in progress

Uploads go to ``tmp/`` and are then moved to their final name (a rename on a filesystem, a copy on S3,
whose PUT is itself atomic), blob first, pointer last: a reader never sees half an entry. Names are
write-once: an existing blob or pointer is never overwritten, so when two builds compile one key at
once, the first pointer published stands and both are complete entries. Every download is checked
three times before use: the tar's sha256 against its name, the unpacked entry's content hash against
the one the pointer and entry.json record, then its programs as data (``backends._verify``: a
consistent forged entry hashes fine, so a program holding pickles or code strings is refused too). An entry that fails is reported, removed from the remote
(so the rebuilt one can be published) and treated as a miss: it is rebuilt and re-uploaded.

An unreachable remote is reported once; the build goes on with the local cache alone, or stops with a
CacheError when ``cache.require_remote=true``. Credentials are read by fsspec and s3fs from the
environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``AWS_PROFILE``,
...); they never appear in a config, a message or the manifest.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import CacheError
from ._keys import canonical_json
from ._store import ENTRY_FILE, ENTRY_SCHEMA, FILES_DIR, Entry, Store, _files, content_hash, program_problem

__all__ = ["RemoteStore", "REMOTE_KINDS", "REMOTE_TIMEOUTS", "pack_entry", "install_packed"]

REMOTE_KINDS = ("compile", "artifacts")
MAX_POINTER_BYTES = 4096  # a pointer is {"blob", "content_hash", "size"}: ~200 bytes
MAX_MEMBERS = 100_000  # files in one entry's tar
# fsspec options per URL scheme: every remote call has a timeout (the cache, and releases published to a URL)
REMOTE_TIMEOUTS = {"s3": {"config_kwargs": {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 2}}}}


class RemoteStore(Store):
    def __init__(
        self, root: Path, url: str, warn: Callable[[str], None] | None = None, require: bool = False, owner: str = ""
    ) -> None:
        super().__init__(root, warn, owner)
        self.url = url.rstrip("/")
        self.require = require
        self.down = False  # set on the first failure to reach the remote (reported once)
        self.downloaded: list[str] = []  # keys this process took from the remote
        self.uploaded: list[str] = []
        self._fs: Any = None
        self._base = ""

    # -- the Store interface, with a second level -------------------------------------------------

    def lookup(self, kind: str, key: str, full: bool = False) -> Entry | None:
        entry = super().lookup(kind, key, full)
        if entry is not None or kind not in REMOTE_KINDS or self.down:
            return entry
        return self._download(kind, key)

    def put(self, kind: str, key: str, fill: Callable[[Path], dict[str, Any]]) -> Entry:
        entry = super().put(kind, key, fill)
        if kind in REMOTE_KINDS and not self.down:
            self._upload(kind, entry)
        return entry

    def probe(self) -> bool:
        """Can the remote be reached? Reports (once) and returns False if not; with ``require``
        raises CacheError instead."""
        try:
            fs, base = self._filesystem()
            fs.ls(base.split("/")[0] if self.url.startswith("s3://") else base, detail=False)
            return True
        except FileNotFoundError:
            if self.url.startswith("s3://"):
                self._unreachable(FileNotFoundError(f"no bucket {self.url[5:].split('/')[0]!r}"))
                return False
            return True  # a directory not made yet: the first upload makes it
        except Exception as exc:
            self._unreachable(exc)
            return False

    # -- remote I/O ---------------------------------------------------------------------------------

    def _filesystem(self) -> tuple[Any, str]:
        if self._fs is None:
            import fsspec  # type: ignore[import-untyped]

            scheme = self.url.split("://", 1)[0]
            try:
                self._fs, self._base = fsspec.url_to_fs(self.url, **REMOTE_TIMEOUTS.get(scheme, {}))
            except ImportError as exc:
                raise CacheError(
                    f"cache.remote: {self.url} needs a filesystem package that is not installed ({exc}); "
                    "install it with: pip install 'rbln-build[remote]'"
                ) from None
            self._base = self._base.rstrip("/")
        return self._fs, self._base

    def _unreachable(self, exc: BaseException) -> None:
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
        if self.require:
            raise CacheError(
                f"cache.remote: {self.url} cannot be reached ({why}); cache.require_remote=true stops the build. "
                "Check the URL and the credentials in the environment, or set cache.require_remote=false to build locally."
            )
        if not self.down:
            self.down = True
            self.warn(f"cache.remote: {self.url} cannot be reached ({why}); building with the local cache only")

    def _download(self, kind: str, key: str) -> Entry | None:
        try:
            fs, base = self._filesystem()
            pointer_path = f"{base}/{kind}/{key}"
            try:
                raw = fs.cat_file(pointer_path, start=0, end=MAX_POINTER_BYTES + 1)  # a pointer is ~150 bytes
                if len(raw) > MAX_POINTER_BYTES:
                    raise ValueError(f"over {MAX_POINTER_BYTES} bytes")
                pointer = json.loads(raw)
                blob, recorded, size = pointer["blob"], pointer["content_hash"], pointer.get("size")
                if not (isinstance(blob, str) and len(blob) == 64 and all(c in "0123456789abcdef" for c in blob)):
                    raise ValueError(f"bad blob name {blob!r}")
                if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
                    raise ValueError(f"bad size {size!r}")
            except FileNotFoundError:
                return None
            except (ValueError, KeyError, TypeError) as exc:
                self._reject(kind, key, None, f"its pointer is unreadable ({exc})")
                return None
            tmp = self._tmp(self.entry_path(kind, key))
            tmp.parent.mkdir(parents=True, exist_ok=True)
            try:
                packed = tmp.with_name(tmp.name + ".tar")
                try:
                    if size is not None and fs.size(f"{base}/blobs/{blob}") != size:  # before any byte is fetched
                        self._reject(kind, key, blob, f"its blob is not the {size} bytes the pointer records")
                        return None
                    fs.get_file(f"{base}/blobs/{blob}", str(packed))
                except FileNotFoundError:
                    self._reject(kind, key, None, f"its blob {blob} is missing")
                    return None
                actual = _sha256_file(packed)
                if actual != blob:
                    self._reject(kind, key, blob, f"sha256 {actual} != {blob}, the name it was stored under")
                    return None
                entry = _install(self, kind, key, packed, tmp, recorded)
                if isinstance(entry, str):
                    self._reject(kind, key, blob, entry)
                    return None
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.with_name(tmp.name + ".tar").unlink(missing_ok=True)
            self.downloaded.append(key)
            return entry
        except CacheError:
            raise
        except Exception as exc:  # the remote is down or refuses us: build locally
            self._unreachable(exc)
            return None

    def _reject(self, kind: str, key: str, blob: str | None, why: str) -> None:
        """A remote entry that fails verification: reported, removed remotely (so the rebuilt entry
        can be published under the same names), never used."""
        self.warn(
            f"remote cache entry {self.url}/{kind}/{key} is corrupt ({why}); not used, it will be rebuilt "
            "and uploaded again"
        )
        fs, base = self._filesystem()
        for path in [f"{base}/{kind}/{key}"] + ([f"{base}/blobs/{blob}"] if blob else []):
            try:
                fs.rm_file(path)
            except FileNotFoundError:
                pass

    def _upload(self, kind: str, entry: Entry) -> None:
        try:
            fs, base = self._filesystem()
            pointer_path = f"{base}/{kind}/{entry.key}"
            if fs.exists(pointer_path):
                return  # write-once: the first complete entry published stands
            _makedirs(fs, f"{base}/tmp")
            packed = self._tmp(entry.path).with_suffix(".tar")
            try:
                _pack(entry, packed)
                blob, size = _sha256_file(packed), packed.stat().st_size
                blob_path = f"{base}/blobs/{blob}"
                if not fs.exists(blob_path):
                    staged = f"{base}/tmp/{uuid.uuid4().hex}"
                    fs.put_file(str(packed), staged)
                    _publish(fs, staged, blob_path)
            finally:
                packed.unlink(missing_ok=True)
            staged = f"{base}/tmp/{uuid.uuid4().hex}"
            pointer = {"blob": blob, "content_hash": entry.content_hash, "size": size}
            fs.pipe_file(staged, canonical_json(pointer).encode("utf-8"))
            if fs.exists(pointer_path):  # someone published meanwhile: theirs stands
                fs.rm_file(staged)
                return
            _publish(fs, staged, pointer_path)
            self.uploaded.append(entry.key)
        except CacheError:
            raise
        except Exception as exc:
            self._unreachable(exc)


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


def _makedirs(fs: Any, path: str) -> None:
    try:
        fs.makedirs(path, exist_ok=True)
    except Exception:
        pass  # object stores have no folders


def _publish(fs: Any, staged: str, final: str) -> None:
    _makedirs(fs, final.rsplit("/", 1)[0])
    fs.mv(staged, final)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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
    except (OSError, tarfile.TarError, ValueError, KeyError):
        return None
