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
consistent forged entry hashes fine, so a program holding pickles or code strings is refused too).
An entry that fails is reported, skipped (treated as a miss: it is rebuilt) and, unless
``cache.remote_mode=read``, repaired: its pointer is removed only if it still names the same blob,
and the blob only if its bytes do not match its own name (a blob another key points to is never
removed for this key's sake). Pointers are published write-once for real
(``_remote_io.publish_if_absent``: a link on a filesystem, a conditional PUT on S3).

Every remote call is bounded (``_remote_io``: client timeouts and a deadline on the call). An
unreachable remote is reported once per run (worker processes of the run see a marker in the local
cache and stay quiet); the build goes on with the local cache alone, or stops with a CacheError when
``cache.require_remote=true``. Credentials are read from the environment (``AWS_ACCESS_KEY_ID``,
..., or the variables ``cache.key_env``/``secret_env``/``token_env`` name); they never appear in a
config, a message or the manifest.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import CacheError
from ._hashing import content_hash
from ._keys import canonical_json
from ._packing import _pack, _unpack, sha256_of
from ._remote_io import DOWN_MARKER, TRANSFER_TIMEOUT_S, RemoteOptions, bounded, open_filesystem, publish_if_absent
from ._store import FILES_DIR, Entry, Store, program_problem

__all__ = ["RemoteStore", "REMOTE_KINDS", "REMOTE_TIMEOUTS", "pack_entry", "install_packed"]

REMOTE_KINDS = ("compile", "artifacts")
MAX_POINTER_BYTES = 4096  # a pointer is {"blob", "content_hash", "size"}: ~200 bytes
# fsspec options per URL scheme: every remote call has a timeout (the cache, and releases published to a URL)
REMOTE_TIMEOUTS = {"s3": {"config_kwargs": {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 2}}}}


class RemoteStore(Store):
    def __init__(
        self,
        root: Path,
        url: str,
        warn: Callable[[str], None] | None = None,
        require: bool = False,
        owner: str = "",
        options: RemoteOptions | None = None,
    ) -> None:
        super().__init__(root, warn, owner)
        self.url = url.rstrip("/")
        self.require = require
        self.options = options or RemoteOptions()
        # set on the first failure to reach the remote (reported once); another process of this run
        # that found it down left a marker, so this one neither waits on it nor repeats the warning
        self.down = not require and (self.root / DOWN_MARKER).exists()
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
        if kind in REMOTE_KINDS and not self.down and self.options.writes:
            self._upload(kind, entry)
        return entry

    def _call(self, fn: Callable[..., Any], *args: Any, transfer: bool = False, **kwargs: Any) -> Any:
        """One remote call, bounded (a hung server raises RemoteTimeout, a TimeoutError)."""
        return bounded(TRANSFER_TIMEOUT_S if transfer else self.options.call_timeout, fn, *args, **kwargs)

    def probe(self) -> bool:
        """Can the remote be reached? Reports (once) and returns False if not; with ``require``
        raises CacheError instead."""
        try:
            fs, base = self._filesystem()
            attempts = getattr(fs, "retries", None)
            if attempts is not None:
                fs.retries = 1  # one attempt: a server that does not answer costs read_timeout once
            try:
                self._call(fs.ls, base.split("/")[0] if self.url.startswith("s3://") else base, detail=False)
            finally:
                if attempts is not None:
                    fs.retries = attempts
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
            self._fs, self._base = open_filesystem(self.url, self.options)
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
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                (self.root / DOWN_MARKER).touch()
            except OSError:
                pass  # the marker only saves the other workers a wait
            self.warn(f"cache.remote: {self.url} cannot be reached ({why}); building with the local cache only")

    def _download(self, kind: str, key: str) -> Entry | None:
        try:
            fs, base = self._filesystem()
            pointer_path = f"{base}/{kind}/{key}"
            raw = b""
            try:
                raw = self._call(fs.cat_file, pointer_path, start=0, end=MAX_POINTER_BYTES + 1)  # ~150 bytes
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
                self._reject(kind, key, None, f"its pointer is unreadable ({exc})", raw)
                return None
            tmp = self._tmp(self.entry_path(kind, key))
            tmp.parent.mkdir(parents=True, exist_ok=True)
            try:
                packed = tmp.with_name(tmp.name + ".tar")
                try:
                    if size is not None and self._call(fs.size, f"{base}/blobs/{blob}") != size:  # before fetching
                        # the pointer and the blob disagree: the pointer is this key's problem; the blob
                        # may be another key's, so it stays
                        self._reject(kind, key, None, f"its blob is not the {size} bytes the pointer records", raw)
                        return None
                    self._call(fs.get_file, f"{base}/blobs/{blob}", str(packed), transfer=True)
                except FileNotFoundError:
                    self._reject(kind, key, None, f"its blob {blob} is missing", raw)
                    return None
                actual = sha256_of(packed)
                if actual != blob:
                    self._reject(kind, key, blob, f"sha256 {actual} != {blob}, the name it was stored under", raw)
                    return None
                entry = _install(self, kind, key, packed, tmp, recorded)
                if isinstance(entry, str):  # a whole blob (its name checks out): only this pointer is wrong
                    self._reject(kind, key, None, entry, raw)
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

    def _reject(self, kind: str, key: str, bad_blob: str | None, why: str, pointer: bytes) -> None:
        """A remote entry that fails verification: reported and never used (a miss: it is rebuilt).
        In ``read`` mode nothing remote is touched. Otherwise it is repaired so that the rebuilt
        entry can be published: the pointer is removed if it still holds the bytes we read, and the
        blob (``bad_blob``) only when its bytes do not match its own name, which makes it wrong for
        every key; a whole blob that a wrong pointer named is another key's and stays."""
        if not self.options.writes:
            self.warn(
                f"remote cache entry {self.url}/{kind}/{key} is corrupt ({why}); skipped and built locally "
                "(cache.remote_mode=read: left on the remote; report it to whoever writes the cache)"
            )
            return
        self.warn(
            f"remote cache entry {self.url}/{kind}/{key} is corrupt ({why}); not used, it will be rebuilt "
            "and uploaded again"
        )
        fs, base = self._filesystem()
        try:
            pointer_path = f"{base}/{kind}/{key}"
            if self._call(fs.cat_file, pointer_path, start=0, end=MAX_POINTER_BYTES + 1) == pointer:
                self._call(fs.rm_file, pointer_path)
            if bad_blob is not None:
                self._call(fs.rm_file, f"{base}/blobs/{bad_blob}")
        except FileNotFoundError:
            pass
        except Exception as exc:  # no right to delete, say: the entry is still skipped, the remote still serves
            self.warn(
                f"remote cache entry {self.url}/{kind}/{key}: could not remove it ({type(exc).__name__}); "
                "it stays corrupt on the remote until someone with write access runs `rbln-build gc --remote`"
            )

    def _upload(self, kind: str, entry: Entry) -> None:
        try:
            fs, base = self._filesystem()
            pointer_path = f"{base}/{kind}/{entry.key}"
            if self._call(fs.exists, pointer_path):
                return  # write-once: the first complete entry published stands
            self._call(_makedirs, fs, f"{base}/tmp")
            packed = self._tmp(entry.path).with_suffix(".tar")
            new_blob = False
            try:
                _pack(entry, packed)
                blob, size = sha256_of(packed), packed.stat().st_size
                blob_path = f"{base}/blobs/{blob}"
                try:
                    there: int | None = self._call(fs.size, blob_path)
                except FileNotFoundError:
                    there = None
                # a blob of this name holds exactly these bytes; one of another size is damaged
                # (truncated, say) whoever points to it, and is replaced
                if there != size:
                    staged = f"{base}/tmp/{uuid.uuid4().hex}"
                    self._call(fs.put_file, str(packed), staged, transfer=True)
                    self._call(_publish, fs, staged, blob_path, transfer=True)
                    new_blob = there is None
            finally:
                packed.unlink(missing_ok=True)
            pointer = canonical_json({"blob": blob, "content_hash": entry.content_hash, "size": size}).encode("utf-8")
            if publish_if_absent(fs, pointer_path, pointer, self.options.call_timeout, f"{base}/tmp"):
                self.uploaded.append(entry.key)
            elif new_blob:  # someone published this key meanwhile and theirs stands: ours is an orphan
                try:
                    self._call(fs.rm_file, blob_path)
                except Exception:
                    pass  # `rbln-build gc --remote` collects it
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
