"""The content-addressed cache: what a build has made, verified on every read.

_keys     compile keys and cell keys (content hashes of every input)
_store    the Store: entries, result records, failures
_files    writing a file whole (temporary name, then rename): write_atomic, a cell record's writer,
          and record packs (a batch's cell records in one file, as a sweep's scheduler writes them)
_hashing  an entry's content hash and file stats, the hashes of metadata and records
_result   CellResult and CompileOutcome, the records the Store keeps
_remote   a shared remote behind the Store (cache.remote=, fsspec)
_packing  one entry as a tar: packed deterministically, unpacked defensively (the remote's unit)
_remote_io      how the remote talks to its filesystem: options, bounded calls, write-once publishing
_remote_sync    entries held locally but missing on the remote, uploaded by the next run
_remote_inputs  compile inputs on the remote, by content (inputs/<sha256>)
_lock     the build directory's lock
"""

from __future__ import annotations

from ._files import PACK_SUFFIX, read_pack, write_atomic
from ._hashing import content_hash, file_stats, meta_hash, record_body, result_hash
from ._keys import canonical_json, cell_key, compile_key, digest, key_code_versions
from ._lock import LOCK_FILE, acquire_build_lock, lock_for_doit
from ._remote import REMOTE_TIMEOUTS, RemoteStore, install_packed, pack_entry
from ._remote_inputs import INPUTS_DIR, fetch_input, publish_input, sha256_of
from ._remote_io import DOWN_MARKER, REMOTE_MODES, RemoteOptions, bounded, once_key, open_filesystem
from ._remote_sync import (
    MAX_SHARD_BYTES,
    SHARDS_DIR,
    decode_shard,
    fetch_shard,
    shard_file,
    sync_after_build,
    upload_missing,
)
from ._result import CellResult, CompileOutcome
from ._store import ENTRY_FILE, FILES_DIR, RECORD_KINDS, Entry, Store, is_key, render_record

__all__ = [
    "render_record",
    "INPUTS_DIR",
    "fetch_input",
    "publish_input",
    "read_pack",
    "sha256_of",
    "CellResult",
    "CompileOutcome",
    "DOWN_MARKER",
    "ENTRY_FILE",
    "Entry",
    "FILES_DIR",
    "LOCK_FILE",
    "PACK_SUFFIX",
    "RECORD_KINDS",
    "REMOTE_MODES",
    "REMOTE_TIMEOUTS",
    "RemoteOptions",
    "RemoteStore",
    "Store",
    "acquire_build_lock",
    "bounded",
    "canonical_json",
    "cell_key",
    "compile_key",
    "content_hash",
    "digest",
    "file_stats",
    "install_packed",
    "is_key",
    "key_code_versions",
    "lock_for_doit",
    "meta_hash",
    "once_key",
    "open_filesystem",
    "pack_entry",
    "result_hash",
    "record_body",
    "upload_missing",
    "sync_after_build",
    "shard_file",
    "fetch_shard",
    "decode_shard",
    "MAX_SHARD_BYTES",
    "SHARDS_DIR",
    "write_atomic",
]
