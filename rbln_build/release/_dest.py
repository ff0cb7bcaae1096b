"""Publish a staged release to its destination: a local folder, or an fsspec URL (``file://``, ``s3://``).

A release becomes visible all at once or not at all, as the remote cache publishes its entries:

* a local folder: the release is staged beside its final name (``<to>/.tmp-<name>-*``) and renamed
  into place in one step;
* a URL: every file is uploaded under ``<to>/.tmp-release/<name>-<random>/``, then moved to
  ``<to>/<name>/``, the signature next and ``release.json`` last. Until ``release.json`` is there,
  ``verify`` (and any consumer) sees no release; an interrupted publish leaves files that the next
  ``release`` of the same content completes, and an upload folder a killed release left (its newest
  file older than ``STALE_UPLOAD_S``, 6 hours) is removed by the next URL release to that destination.

A release name is immutable. If ``<to>/<name>/release.json`` exists: the same bytes are a no-op
("unchanged") once the release there verifies (else ``ReleaseDamaged``, exit 1); other bytes are a
``ReleaseConflict`` naming the first file that differs.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from ..errors import BuildError, UserError
from ._format import MAX_RELEASE_JSON_BYTES, RELEASE_FILE, SELF_HASH_KEY, SIGNATURE_FILE, filesystem, redact

__all__ = ["ReleaseConflict", "ReleaseDamaged", "filesystem", "is_url", "local_staging", "publish"]


class ReleaseConflict(UserError):
    """A release of other content already holds the name."""


class ReleaseDamaged(BuildError):
    """This release already holds the name, but its files do not match its release.json."""


def is_url(to: str) -> bool:
    return "://" in to


def local_staging(parent: Path, name: str) -> Path:
    """A staging folder beside ``<parent>/<name>``. Staging folders of this name left by a release
    process that no longer runs (killed) are removed first: only ours, by their exact pattern."""
    for old in parent.glob(f".tmp-{glob.escape(name)}-*-*"):
        pid = old.name[len(f".tmp-{name}-") :].split("-", 1)[0]
        if pid.isdigit() and old.is_dir() and not old.is_symlink() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return parent / f".tmp-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, owned by someone else
    return True


def _first_difference(existing: bytes, new: bytes) -> str:
    """The first file (in path order) whose entry differs, or release.json when only records differ."""
    try:
        old_files = json.loads(existing).get("files") or {}
    except (ValueError, AttributeError):
        return f"{RELEASE_FILE} (the existing one is not readable JSON)"
    new_files = json.loads(new)["files"]
    for rel in sorted(set(old_files) | set(new_files)):
        old, cur = old_files.get(rel), new_files.get(rel)
        if old == cur:
            continue
        if old is None:
            return f"{rel} (only in this build)"
        if cur is None:
            return f"{rel} (only in the existing release)"
        return f"{rel} (sha256 {str(old.get('sha256'))[:12]}... there, {str(cur.get('sha256'))[:12]}... here)"
    old_body, new_body = json.loads(existing), json.loads(new)
    for body in (old_body, new_body):
        body.pop(SELF_HASH_KEY, None)  # it differs whenever anything does: name what differs
    where = _first_differing_key(old_body, new_body)
    return f"{RELEASE_FILE} at {where} (every file is the same)"


def _first_differing_key(old: Any, new: Any, path: str = "") -> str:
    """The first key path (in sorted order) where two JSON values differ, e.g. ``provenance.git.clean``."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key) or (key in old) != (key in new):
                return _first_differing_key(old.get(key), new.get(key), f"{path}.{key}" if path else str(key))
    return path or "its top level"


def _compare(
    where: str, existing: bytes, new: bytes, old_sig: bytes | None, new_sig: bytes | None, location: str
) -> str:
    """ "unchanged" when ``location`` (``where``, credentials and all) already holds this release and
    it verifies; ReleaseConflict when it holds another; ReleaseDamaged when its files do not match."""
    if existing != new:
        raise ReleaseConflict(
            f"{where} already holds a release with different content; first difference: "
            f"{_first_difference(existing, new)}. A release name is immutable: choose a new name."
        )
    if new_sig is not None and old_sig != new_sig:
        raise ReleaseConflict(
            f"{where} already holds this release, "
            + ("unsigned" if old_sig is None else "signed by another key")
            + f"; a release name is immutable: choose a new name to publish a signed {SIGNATURE_FILE}."
        )
    from ._verify import verify_release

    verdict = verify_release(location)  # the same release.json says nothing of the files beside it
    if not verdict.ok:
        rel, problem = verdict.problems[0]
        more = f" (and {len(verdict.problems) - 1} more problem(s))" if len(verdict.problems) > 1 else ""
        raise ReleaseDamaged(
            f"{where} already holds this release, but it is damaged: {rel}: {problem}{more}; nothing written. "
            f"See rbln-build verify {where}; remove it yourself and release again, or choose a new name."
        )
    return "unchanged"


def publish(staging: Path, to: str, name: str) -> tuple[str, str]:
    """Publish ``staging`` (release.json and the cell folders, maybe a signature) as ``<to>/<name>``:
    (its location, "published" | "unchanged")."""
    data = (staging / RELEASE_FILE).read_bytes()
    sig_path = staging / SIGNATURE_FILE
    signature = sig_path.read_bytes() if sig_path.is_file() else None
    if is_url(to) and not to.startswith("file://"):
        return _publish_url(staging, to.rstrip("/"), name, data, signature)
    if is_url(to):
        fs_root = to[len("file://") :]
        return _publish_url(staging, to.rstrip("/"), name, data, signature, local_check=Path(fs_root) / name)
    dest = Path(to) / name
    return str(dest), _publish_local(staging, dest, data, signature)


def _existing_local(dest: Path) -> tuple[bytes, bytes | None] | None:
    if not (dest.exists() or dest.is_symlink()):
        return None
    release = dest / RELEASE_FILE
    if dest.is_symlink() or not release.is_file() or release.is_symlink():
        raise ReleaseConflict(
            f"{dest} exists but holds no {RELEASE_FILE}: not a release this tool published. Choose another "
            "name or --to, or remove that folder yourself."
        )
    if release.stat().st_size > MAX_RELEASE_JSON_BYTES:
        raise ReleaseConflict(f"{release}: over {MAX_RELEASE_JSON_BYTES:,} bytes; not a release. Choose a new name.")
    sig = dest / SIGNATURE_FILE
    return release.read_bytes(), (sig.read_bytes()[:128] if sig.is_file() and not sig.is_symlink() else None)


def _flush(root: Path) -> None:
    """Everything staged reaches the disk before the rename makes it visible: one ``sync`` (a
    per-file fsync took 19 s of a 27 s release of 2,469 small files on a busy disk), then the folder."""
    os.sync()
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish_local(staging: Path, dest: Path, data: bytes, signature: bytes | None) -> str:
    found = _existing_local(dest)
    if found is not None:
        return _compare(str(dest), found[0], data, found[1], signature, str(dest))
    _flush(staging)
    try:
        os.rename(staging, dest)  # one step: the whole release or nothing
    except OSError:
        found = _existing_local(dest)  # another release of the same name won the race
        if found is None:
            raise
        return _compare(str(dest), found[0], data, found[1], signature, str(dest))
    return "published"


def _cat_bounded(fs: Any, path: str, limit: int) -> bytes | None:
    try:
        if fs.size(path) > limit:
            raise ReleaseConflict(f"{path}: over {limit:,} bytes; not a release. Choose a new name.")
        return bytes(fs.cat_file(path))
    except FileNotFoundError:
        return None


def _mv(fs: Any, src: str, dst: str) -> None:
    try:
        fs.makedirs(dst.rsplit("/", 1)[0], exist_ok=True)
    except Exception:
        pass  # object stores have no folders
    fs.mv(src, dst)


STALE_UPLOAD_S = 6 * 3600  # an upload folder whose newest file is older than this was left by a killed release


def _modified(info: dict[str, Any]) -> float | None:
    """A listed file's modification time (seconds since the epoch): ``mtime`` on a local disk,
    ``LastModified`` on S3; None when the filesystem gives neither."""
    value: Any = info.get("mtime", info.get("LastModified"))
    if value is not None and hasattr(value, "timestamp"):
        return float(value.timestamp())
    return float(value) if isinstance(value, (int, float)) else None


def _remove_stale_uploads(fs: Any, uploads: str) -> None:
    """Remove ``<to>/.tmp-release/<name>-<hex>/`` folders that a killed URL release left: those whose
    newest file is older than ``STALE_UPLOAD_S`` (a release still uploading writes a file at least
    that often). Only folders of our own naming; anything that cannot be listed or dated is left."""
    import time

    try:
        entries = fs.ls(uploads, detail=False)
    except Exception:  # no uploads folder (the usual case), or one we cannot list
        return
    now = time.time()
    for entry in entries:
        leaf = str(entry).rstrip("/").rsplit("/", 1)[-1]
        prefix, _, token = leaf.rpartition("-")
        if not prefix or len(token) != 32 or any(c not in "0123456789abcdef" for c in token):
            continue
        try:
            times = [_modified(i) for i in fs.find(entry, detail=True).values()]
            if times and None not in times and now - max(t for t in times if t is not None) > STALE_UPLOAD_S:
                fs.rm(entry, recursive=True)
        except Exception:
            continue


def _publish_url(
    staging: Path, to: str, name: str, data: bytes, signature: bytes | None, local_check: Path | None = None
) -> tuple[str, str]:
    fs, base = filesystem(to)
    final = f"{base}/{name}"
    where = f"{redact(to)}/{name}"
    if local_check is not None and (local_check.is_symlink() or (local_check.exists() and not local_check.is_dir())):
        raise ReleaseConflict(f"{local_check} exists and is not a release folder; choose another name or --to.")
    try:  # the destination's answer to the first question: an unreachable or refused URL is said here
        fs.invalidate_cache()
        existing = _cat_bounded(fs, f"{final}/{RELEASE_FILE}", MAX_RELEASE_JSON_BYTES)
        old_sig = None if existing is None else _cat_bounded(fs, f"{final}/{SIGNATURE_FILE}", 128)
    except UserError:
        raise
    except Exception as exc:
        raise _failed(name, where, to, exc, "reading") from None
    if existing is not None:
        return where, _compare(where, existing, data, old_sig, signature, f"{to}/{name}")
    rels = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
    payload = [r for r in rels if r not in (RELEASE_FILE, SIGNATURE_FILE)]
    _remove_stale_uploads(fs, f"{base}/.tmp-release")
    tmp = f"{base}/.tmp-release/{name}-{uuid.uuid4().hex}"
    try:
        for rel in [*payload, *([SIGNATURE_FILE] if signature is not None else []), RELEASE_FILE]:
            target = f"{tmp}/{rel}"
            try:
                fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
            except Exception:
                pass
            fs.put_file(str(staging / rel), target)
        try:
            leftovers = sorted(p[len(final) :].lstrip("/") for p in fs.find(final))
        except FileNotFoundError:
            leftovers = []
        unknown = [r for r in leftovers if r not in rels]
        if unknown:
            raise ReleaseConflict(
                f"{where} holds {unknown[0]!r}, which this release does not have, and no {RELEASE_FILE}: "
                "not a release this tool published. Choose another name, or remove it yourself."
            )
        for rel in payload:  # invisible until release.json: verify and consumers need it
            _mv(fs, f"{tmp}/{rel}", f"{final}/{rel}")
        if signature is not None:
            _mv(fs, f"{tmp}/{SIGNATURE_FILE}", f"{final}/{SIGNATURE_FILE}")
        fs.invalidate_cache()
        raced = _cat_bounded(fs, f"{final}/{RELEASE_FILE}", MAX_RELEASE_JSON_BYTES)
        if raced is not None:  # another release of this name was published meanwhile
            return where, _compare(where, raced, data, None, None, f"{to}/{name}")
        _mv(fs, f"{tmp}/{RELEASE_FILE}", f"{final}/{RELEASE_FILE}")  # the release is visible from here on
    except UserError:
        raise
    except Exception as exc:
        raise _failed(name, where, to, exc, "uploading to") from None
    finally:
        try:
            if fs.exists(tmp):
                fs.rm(tmp, recursive=True)
        except Exception:
            pass
    return where, "published"


def _failed(name: str, where: str, to: str, exc: Exception, doing: str) -> BuildError:
    """The one line of a destination that failed: its error's first line, any user:password the URL
    held removed from it (a library may quote the URL, or its host part, in its message)."""
    why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
    netloc = to.partition("://")[2].split("/", 1)[0]
    if "@" in netloc:
        userinfo = netloc.rsplit("@", 1)[0]
        for secret in {userinfo, *userinfo.split(":")} - {""}:
            why = why.replace(secret, "***")
    return BuildError(
        f"release {name}: {doing} {where} failed ({why}); nothing was made visible ({RELEASE_FILE} goes "
        "last). Check the URL and the credentials in the environment, then run the same release again."
    )
