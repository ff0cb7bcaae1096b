"""The content-addressed store under ``<build_dir>/cache``.

Layout::

    cache/compile/<compile key>/entry.json   compile baselines (what the backend wrote) + report
    cache/compile/<compile key>/files/...
    cache/artifacts/<artifact key>/...       finalized cell artifacts (same shape)
    cache/results/<cell key>.json            one cell's CellResult (resolution, artifact pointer or error)
    cache/results/<pack key>.pack            a batch's CellResults, one record per line (``_files``: record packs)
    cache/failures/<compile key>.json        a compile key's failure (CompileOutcome), when it failed

Every key is a sha256 hex digest, checked wherever a key becomes a path (``entry_path``,
``record_path``): a key read back from a record can never name a place outside the store.

Every write goes to a temporary name in the destination's own directory (``.tmp-*``) and is renamed
into place only when complete, so a killed build leaves at most a ``.tmp-*`` folder, which the next
run (holding the build lock) removes. An entry records a content hash: sha256 over its files in
sorted relative-path order, each preceded by its name and size, then the entry's metadata as
canonical JSON. ``lookup`` verifies an entry before it is used; an entry that fails is reported as a
warning, removed, and treated as a miss (so it is rebuilt), never used and never a crash. A full
verification also checks the entry's programs as data (``backends._verify``: a consistent entry
can still be forged by whoever can write the cache).

To keep a no-op rebuild fast, an entry also records each file's (size, mtime, ctime, inode). When
they all still match, the files are taken as unchanged; any difference triggers the full hash.
``ctime`` cannot be set from user space, so a rewrite that restores size and mtime is still caught.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._documents import read_file
from ._files import PACK_SUFFIX, PackedRecords, _fsync_dir, _tmp_name, write_atomic, write_pack, write_record
from ._hashing import content_hash, file_stats, meta_hash, record_body
from ._keys import canonical_json

__all__ = ["Entry", "Store", "content_hash", "is_key", "RECORD_KINDS", "render_record"]

ENTRY_FILE = "entry.json"
FILES_DIR = "files"
ENTRY_SCHEMA = 1
LOCKS_DIR = "locks"  # a shared cache's per-key lock files
RECORD_KINDS = ("results", "failures")
_KEY = re.compile(r"[0-9a-f]{64}")


def is_key(key: object) -> bool:
    """A cache key: exactly 64 lowercase hex digits (a sha256), so it is always one path component."""
    return isinstance(key, str) and _KEY.fullmatch(key) is not None


def render_record(key: str, body: dict[str, Any]) -> bytes:
    """A record's bytes: ``canonical_json({"content_hash": ..., "key": ..., "result": body})``, with the
    body serialized once (for its hash and the record alike), the keys sorted as canonical_json sorts
    them. ``Store.load_record`` checks the hash and the key."""
    text = canonical_json(body)
    content = hashlib.sha256(text.encode("utf-8")).hexdigest()
    # both strings are hex digits (a key is checked), so their JSON is the string in quotes
    return f'{{"content_hash":"sha256:{content}","key":"{_checked_key(key)}","result":{text}}}'.encode()


def _checked_key(key: object) -> str:
    if not is_key(key):
        raise ValueError(f"not a cache key (64 hex digits): {key!r}")
    return key  # type: ignore[return-value]


# entry.json files this process checked (``lookup``'s fast path; a sweep looks up a few hundred entries
# thousands of times): path -> (its stat signature, meta, the files' recorded stat, content hash).
_READ: dict[str, tuple[tuple[int, int, int, int], dict[str, Any], Any, str]] = {}
_READ_MAX = 4096


@dataclass(frozen=True)
class Entry:
    key: str
    path: Path
    meta: dict[str, Any]
    content_hash: str
    made: bool = field(default=False, compare=False)  # made by this put (not found, not another build's)

    @property
    def files(self) -> Path:
        return self.path / FILES_DIR


class Store:
    """Entries of one build directory's cache. ``warn`` receives every corruption warning.

    ``owner`` is set when the cache is shared by several build dirs (``cache.dir``): then an entry is
    made under a per-key lock (``locks/<kind>-<key>.lock``, so two builds never make one key at once:
    the second waits and takes the first one's entry), temporary names carry the owner tag, and
    ``clean_temporaries`` removes only this owner's."""

    def __init__(self, root: Path, warn: Callable[[str], None] | None = None, owner: str = "") -> None:
        self.root = Path(root)
        self.warn = warn or (lambda msg: print(f"warning: {msg}", file=sys.stderr, flush=True))
        self.owner = owner
        self.packs = PackedRecords(os.path.join(self.root, "results"), is_key)
        self._packs_checked = False

    def _tmp(self, final: Path) -> Path:
        return _tmp_name(final, self.owner)

    @contextlib.contextmanager
    def key_lock(self, kind: str, key: str) -> Iterator[None]:
        """Hold ``kind``/``key``'s lock in a shared cache (nothing to hold in a build dir's own)."""
        if not self.owner:
            yield
            return
        from filelock import FileLock

        folder = self.root / LOCKS_DIR
        folder.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder / f"{kind}-{_checked_key(key)}.lock")):
            yield

    def entry_path(self, kind: str, key: str) -> Path:
        return self.root / kind / _checked_key(key)

    # -- entries (folders) ------------------------------------------------------------------------

    def lookup(self, kind: str, key: str, full: bool = False) -> Entry | None:
        """The verified entry, or None (missing, or corrupt: then it is reported and removed)."""
        path = self.entry_path(kind, key)
        record_file = path / ENTRY_FILE
        try:
            st = os.stat(record_file)
            if not stat.S_ISREG(st.st_mode):
                raise FileNotFoundError(record_file)
        except OSError:
            if path.exists():
                self._discard(path, f"cache entry {path} has no {ENTRY_FILE}; removed, it will be rebuilt")
            return None
        files_dir = path / FILES_DIR
        signature = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        seen = _READ.get(str(record_file))
        if not full and seen is not None and seen[0] == signature and file_stats(files_dir) == seen[2]:
            # This process checked this very entry.json (any rewrite changes its ctime) and its files
            # still have the stat it records: the fast path below, without parsing and hashing again.
            return Entry(key, path, seen[1], seen[3])
        try:
            record = json.loads(read_file(record_file))
            meta, recorded, stats = record["meta"], record["content_hash"], record["stat"]
            if record.get("key") != key or record.get("schema") != ENTRY_SCHEMA:
                raise ValueError("key or schema does not match")
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            self._discard(path, f"cache entry {path}: unreadable {ENTRY_FILE} ({exc}); removed, it will be rebuilt")
            return None
        if not full and file_stats(files_dir) == stats and record.get("meta_hash") == meta_hash(meta):
            if len(_READ) >= _READ_MAX:
                _READ.clear()
            _READ[str(record_file)] = (signature, meta, stats, recorded)
            return Entry(key, path, meta, recorded)
        actual = content_hash(files_dir, meta)
        if actual != recorded:
            self._discard(
                path,
                f"cache entry {path} is corrupt (content hash {actual} != recorded {recorded}); "
                "removed, it will be rebuilt",
            )
            return None
        problem = program_problem(files_dir)
        if problem is not None:  # consistent, but holds a program that is not data only
            self._discard(path, f"cache entry {path}: {problem}; removed, it will be rebuilt")
            return None
        record["stat"] = file_stats(files_dir)  # verified: refresh the fast-path fingerprint
        try:
            write_atomic(record_file, canonical_json(record).encode("utf-8"), self.owner)
        except OSError:
            pass
        return Entry(key, path, meta, recorded)

    def put(self, kind: str, key: str, fill: Callable[[Path], dict[str, Any]]) -> Entry:
        """Build an entry: ``fill(files_dir)`` writes the files and returns the metadata. In a shared
        cache, under the key's lock: an entry another build made meanwhile is taken instead."""
        with self.key_lock(kind, key):
            existing = Store.lookup(self, kind, key) if self.owner else None  # this level only, no remote
            return existing if existing is not None else self._put(kind, key, fill)

    def _put(self, kind: str, key: str, fill: Callable[[Path], dict[str, Any]]) -> Entry:
        final = self.entry_path(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._tmp(final)
        try:
            (tmp / FILES_DIR).mkdir(parents=True)
            meta = fill(tmp / FILES_DIR)
            digest = content_hash(tmp / FILES_DIR, meta)
            record = {
                "schema": ENTRY_SCHEMA,
                "key": key,
                "meta": meta,
                "content_hash": digest,
                "stat": file_stats(tmp / FILES_DIR),
                "meta_hash": meta_hash(meta),
            }
            write_atomic(tmp / ENTRY_FILE, canonical_json(record).encode("utf-8"), self.owner)
            _fsync_dir(tmp)
            try:
                os.rename(tmp, final)
            except OSError:
                # Someone else finished the same key first; theirs is as good as ours if it verifies.
                existing = self.lookup(kind, key, full=True)
                if existing is not None:
                    return existing
                os.rename(tmp, final)
            _fsync_dir(final.parent)
            return Entry(key, final, meta, digest, made=True)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    # -- records (small JSON files: cell results, compile failures) -------------------------------

    def record_path(self, kind: str, key: str) -> Path:
        assert kind in RECORD_KINDS, kind
        return self.root / kind / f"{_checked_key(key)}.json"

    def load_record(self, kind: str, key: str) -> dict[str, Any] | None:
        """The record's body if it is there and intact (its file, else the newest pack holding it:
        ``_files``: record packs); a damaged one is reported, removed, a miss."""
        path = self.record_path(kind, key)
        try:
            record = json.loads(read_file(path))  # a FIFO or a link to /dev/zero: damaged, never waited on or read
            return record_body(record, key)  # type: ignore[no-any-return]
        except FileNotFoundError:
            return self.packed_record(key)[1] if kind == "results" else None
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            self._discard(path, f"cache record {path} is corrupt ({exc}); removed, it will be redone")
            return None

    def packed_record(self, key: str, read_only: bool = False) -> tuple[str | None, dict[str, Any] | None]:
        """(pack key, body) of the cell's newest packed result, or (None, None). The first look-up
        scans the packs; unless ``read_only``, one that does not verify is then reported and removed."""
        hit = self.packs.get(key)
        if not read_only and not self._packs_checked:
            self._packs_checked = True
            for path, why in self.packs.bad:
                if why.startswith("line "):
                    self.warn(f"cache pack {path}: {why}; that cell will be redone")
                else:
                    self._discard(
                        Path(path), f"cache pack {path} is corrupt ({why}); removed, its cells will be redone"
                    )
        return hit if hit is not None else (None, None)

    def save_record(self, kind: str, key: str, body: dict[str, Any]) -> list[int] | None:
        """Write the record; returns its file's fingerprint as written (size, mtime, ctime, inode:
        what the results index keeps), or None when it cannot be taken."""
        return self.save_rendered(kind, key, render_record(key, body))

    def save_rendered(self, kind: str, key: str, data: bytes) -> list[int] | None:
        """``save_record`` of a record ``render_record`` made already (a worker renders its cells'
        records, the scheduler only writes them: ``_jobs.cells_job``)."""
        assert kind in RECORD_KINDS, kind
        path = os.path.join(self.root, kind, f"{_checked_key(key)}.json")  # record_path, as a str
        write_record(path, data, self.owner)
        try:
            st = os.stat(path)
        except OSError:
            return None
        return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]

    def save_pack(self, records: list[tuple[str, bytes]]) -> tuple[str, list[int] | None]:
        """Write cell results (cell key, ``render_record`` bytes) as one pack (``_files``: record packs); returns
        its key and its fingerprint as written (None when it cannot be taken)."""
        written = write_pack(os.path.join(self.root, "results"), [data for _key, data in records], self.owner)
        self.packs.added(key for key, _data in records)
        return written

    def pack_path(self, key: str) -> str:
        return os.path.join(self.root, "results", f"{_checked_key(key)}{PACK_SUFFIX}")

    def drop_record(self, kind: str, key: str) -> None:
        """Remove the record's file; a packed one is never given again by this Store (its pack holds
        other cells' records too: the cell is redone and its new record counts over it)."""
        self.record_path(kind, key).unlink(missing_ok=True)
        if kind == "results":
            self.packs.dropped.add(key)

    # -- housekeeping -----------------------------------------------------------------------------

    def clean_temporaries(self) -> int:
        """Remove ``.tmp-*`` left by killed builds (in a shared cache: only this owner's). Call only
        while holding the build lock. Each removal is checked to lie inside the cache, resolved."""
        removed = 0
        if not self.root.is_dir():
            return 0
        real_root = self.root.resolve()
        kinds = [p for p in self.root.iterdir() if p.is_dir() and not p.is_symlink()]
        # An entry's own folder too: a verified lookup rewrites its entry.json (write_atomic) in place.
        entries = [e for k in kinds for e in k.iterdir() if is_key(e.name) and e.is_dir() and not e.is_symlink()]
        pattern = f".tmp-*-{self.owner}-*" if self.owner else ".tmp-*"
        for kind_dir in [self.root, *kinds, *entries]:
            if real_root not in kind_dir.resolve().parents and kind_dir.resolve() != real_root:
                continue
            for tmp in kind_dir.glob(pattern):
                if tmp.is_dir() and not tmp.is_symlink():
                    shutil.rmtree(tmp, ignore_errors=True)
                else:
                    tmp.unlink(missing_ok=True)
                removed += 1
        return removed

    def _discard(self, path: Path, message: str) -> None:
        self.warn(message)
        real_root = self.root.resolve()
        if real_root not in path.resolve().parents:  # e.g. a kind folder replaced by a link elsewhere
            self.warn(f"{path} resolves outside {real_root}; left in place")
            return
        try:
            if path.is_dir() and not path.is_symlink():
                aside = self._tmp(path)
                os.rename(path, aside)
                shutil.rmtree(aside, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        except OSError:
            pass


def program_problem(files_dir: Path) -> str | None:
    """Why the entry's programs are not safe to hand to a loader (``backends._verify``), or None."""
    from ..backends import verify_entry_files
    from ..errors import IntegrityError

    try:
        verify_entry_files(files_dir)
    except IntegrityError as exc:
        return str(exc)
    return None
