"""Compile inputs on the remote cache, by content: ``inputs/<sha256>`` (one file each, write-once).

A Ray build with a writable ``cache.remote`` puts each weight file of a local checkpoint there once
(``publish_input``, by the driver) so that a worker on any node fetches it (``fetch_input``) instead of
reading the driver's ``weights.path``. A name is the sha256 of the bytes it holds: an existing file
of that name and size is the same file and is not uploaded again; one of another size (a truncated
upload) is replaced. Uploads go through ``tmp/`` and are then moved into place, as entries are
(``_remote``). A fetched file is checked against its name (sha256 and size) before anything reads it.

A build needs its inputs only while it runs: ``rbln-build gc --remote`` removes each one older than
``--min-age`` (``commands/_gc_remote.py``; only files named by a sha256).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import IntegrityError
from ._packing import sha256_of

if TYPE_CHECKING:
    from ._remote import RemoteStore

__all__ = ["INPUTS_DIR", "publish_input", "fetch_input", "sha256_of"]

INPUTS_DIR = "inputs"


def _name_ok(sha: str) -> bool:
    return len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)


def publish_input(store: RemoteStore, path: Path, sha: str, size: int) -> bool:
    """Put the file ``path`` (whose sha256 is ``sha``) at ``inputs/<sha>`` unless it is there already.
    True when it was uploaded now. Raises what the remote raises (the caller falls back)."""
    from ._remote import _makedirs, _publish

    if not _name_ok(sha):
        raise ValueError(f"not a sha256 name: {sha!r}")
    fs, base = store._filesystem()
    final = f"{base}/{INPUTS_DIR}/{sha}"
    try:
        there: int | None = store._call(fs.size, final)
    except FileNotFoundError:
        there = None
    if there == size:
        return False
    store._call(_makedirs, fs, f"{base}/tmp")
    staged = f"{base}/tmp/{uuid.uuid4().hex}"
    store._call(fs.put_file, str(path), staged, transfer=True)
    store._call(_publish, fs, staged, final, transfer=True)
    return True


def fetch_input(store: RemoteStore, sha: str, size: int, dest: Path, label: str) -> None:
    """Download ``inputs/<sha>`` to ``dest`` and check it (size, sha256) before anyone reads it;
    IntegrityError naming ``label`` (the file the driver read) when it is missing or does not match."""
    if not _name_ok(sha):
        raise IntegrityError(f"{label}: {sha!r} is not a sha256 name; the task's inputs are damaged.")
    fs, base = store._filesystem()
    where = f"{store.url}/{INPUTS_DIR}/{sha}"
    try:
        store._call(fs.get_file, f"{base}/{INPUTS_DIR}/{sha}", str(dest), transfer=True)
    except FileNotFoundError:
        raise IntegrityError(
            f"{label}: {where} is missing on the remote cache (removed while the build ran?); run the build again."
        ) from None
    got_size = dest.stat().st_size
    got = sha256_of(dest) if got_size == size else None
    if got != sha:
        dest.unlink(missing_ok=True)
        what = f"{got_size} bytes, not {size}" if got is None else f"sha256 {got}"
        raise IntegrityError(
            f"{label}: the copy fetched from {where} does not match its name ({what}); not used. "
            "Remove it from the remote cache and run the build again."
        )
