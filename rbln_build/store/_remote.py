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
from ._keys import canonical_json
from ._packing import _install, _pack, install_packed, pack_entry, sha256_of
from ._remote_io import (
    BACKOFF_S,
    DOWN_MARKER,
    TRANSFER_TIMEOUT_S,
    RemoteOptions,
    bounded,
    clean_stale,
    open_filesystem,
    publish_if_absent,
    transient,
    with_retries,
)
from ._store import Entry, Store

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
        self.failed: list[str] = []  # kind/key whose transfer failed every retry (the remote stayed on)
        self._failing = 0  # keys in a row that failed every retry
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
        """Can the remote be reached (``check``)? Reports (once) and returns False if not; with
        ``require`` raises CacheError instead."""
        why = self.check()
        if why is not None:
            self._unreachable(why)
        return why is None

    def check(self) -> str | None:
        """Before any work: a read (a listing) and, in readwrite mode, a conditional write to
        ``tmp/`` (removed at once; temporaries left there over an hour ago by killed uploads are
        removed too). None when the remote serves this process, else why not. Nothing reported."""
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
        except FileNotFoundError:
            if self.url.startswith("s3://"):
                return f"FileNotFoundError: no bucket {self.url[5:].split('/')[0]!r}"
            # a directory not made yet: the first upload makes it
        except Exception as exc:
            return _why(exc)
        if not self.options.writes:
            return None
        try:
            probe = f"{base}/tmp/probe-{uuid.uuid4().hex}"
            publish_if_absent(fs, probe, b"", self.options.call_timeout, f"{base}/tmp")
        except Exception as exc:
            return f"cannot write to it: {_why(exc)}; give write access, or set cache.remote_mode=read"
        _forget(
            fs, probe, self.options.call_timeout
        )  # a remote that refuses deletes still serves: gc --remote removes it then
        try:
            self._call(clean_stale, fs, f"{base}/tmp", TRANSFER_TIMEOUT_S)
        except Exception:
            pass  # `rbln-build gc --remote` removes them too
        return None

    # -- remote I/O ---------------------------------------------------------------------------------

    def _filesystem(self) -> tuple[Any, str]:
        if self._fs is None:
            self._fs, self._base = open_filesystem(self.url, self.options)
        return self._fs, self._base

    def _unreachable(self, exc: BaseException | str) -> None:
        why = exc if isinstance(exc, str) else _why(exc)
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

    def _guarded(self, kind: str, key: str, op: Callable[[], Any], then: str) -> Any:
        """``op`` (one key's transfer), retried after transient errors (``with_retries``); then None.
        An error that will not pass turns the remote off for the run (``_unreachable``); so do
        three keys in a row that failed every retry."""
        try:
            result = with_retries(op)
            self._failing = 0
            return result
        except CacheError:
            raise
        except Exception as exc:
            if not transient(exc) or self._failing >= 2:
                self._unreachable(exc)
                return None
            self._failing += 1
            self.failed.append(f"{kind}/{key}")
            self.warn(f"cache.remote: {self.url}/{kind}/{key} failed {len(BACKOFF_S) + 1} times ({_why(exc)}); " + then)
            return None

    def _download(self, kind: str, key: str) -> Entry | None:
        return self._guarded(kind, key, lambda: self._download_once(kind, key), "built locally")  # type: ignore[no-any-return]

    def _download_once(self, kind: str, key: str) -> Entry | None:
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
        self._guarded(kind, entry.key, lambda: self._upload_once(kind, entry), "not uploaded: the next run uploads it")

    def _upload_once(self, kind: str, entry: Entry) -> None:
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
                try:
                    self._call(fs.put_file, str(packed), staged, transfer=True)
                    self._call(_publish, fs, staged, blob_path, transfer=True)
                except BaseException:
                    _forget(fs, staged)  # a failed publish leaves no temporary behind
                    raise
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


def _makedirs(fs: Any, path: str) -> None:
    try:
        fs.makedirs(path, exist_ok=True)
    except Exception:
        pass  # object stores have no folders


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip().rstrip(":")


def _forget(fs: Any, staged: str, timeout: float = 30.0) -> None:
    try:
        bounded(timeout, fs.rm_file, staged)
    except Exception:
        pass  # not there, or the remote is gone: the next writer's check removes it once stale


def _publish(fs: Any, staged: str, final: str) -> None:
    """Move ``staged`` to ``final``: a rename on a filesystem; on an object store a copy, then the
    staged object removed if the store lets us (a bucket that refuses deletes still publishes)."""
    _makedirs(fs, final.rsplit("/", 1)[0])
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        fs.mv(staged, final)
        return
    fs.copy(staged, final)
    _forget(fs, staged)
