"""Verify a release where a consumer has it: a folder or an fsspec URL, no build directory, no torch.

Checked, each problem naming its file:

* ``release.json`` is a regular file of at most ``MAX_RELEASE_JSON_BYTES``, of this format, and its
  ``content_sha256`` matches its own bytes (an edit that did not recompute it is caught);
* with ``--key``: ``release.json.sig`` is there and is an Ed25519 signature of ``release.json``;
* every file it lists is there, a regular file (not a link), of its size and sha256;
* nothing else is there (an extra file or link), besides ``release.json`` and its signature;
* every listed path is relative, inside the release, in a released cell's folder.

A cell folder that travels alone (no ``release.json`` beside it: a Hub repo downloaded with
``--local-dir``, a copied folder) is checked against its own ``rbln-build-files.json`` the same way
(``_lone.verify_lone_cell``): its self-hash, every file it lists, nothing else in the folder but the Hub's
bookkeeping (``.gitattributes``, ``.cache/huggingface/``), which is never loaded.

Files are read in 1 MiB chunks, opened without following links on a local disk.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import UserError
from ._format import (
    FORMAT,
    MAX_RELEASE_JSON_BYTES,
    RELEASE_FILE,
    SELF_HASH_KEY,
    SIGNATURE_FILE,
    filesystem,
    render_release,
    self_hash,
)

__all__ = ["Verdict", "verify_release", "open_release"]

_SHA = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")  # _bundle.check_name's rule (a cell's folder name)
_TOP = {RELEASE_FILE, SIGNATURE_FILE}


@dataclass
class Verdict:
    location: str
    name: str | None = None
    cells: int = 0
    files: int = 0
    total_bytes: int = 0
    signature: str = "absent"  # "absent" | "ok" | "unchecked" | "bad"
    checked_against: str = RELEASE_FILE  # or CELL_FILES: a lone cell checked against its own file
    problems: list[tuple[str, str]] = field(default_factory=list)  # (relative path, what is wrong)

    @property
    def ok(self) -> bool:
        return not self.problems


class LocalRelease:
    """A release folder on this machine (lstat everywhere: a link is reported, never followed)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.location = str(root)

    def listing(self, under: str | None = None) -> dict[str, str]:
        """{relative path: "file" | "symlink" | "special file"} of every non-folder entry; with ``under``
        (a cell's folder), of that folder only, plus release.json and its signature."""
        out: dict[str, str] = {}
        top = self.root
        if under is not None:
            for rel in (*sorted(_TOP), under):
                kind = self._kind(self.root / rel)
                if kind is not None and kind != "folder":
                    out[rel] = kind
            if self._kind(self.root / under) != "folder":
                return out
            top = self.root / under
        for folder, dirs, names in os.walk(top, followlinks=False):
            here = Path(folder)
            for name in [*names, *dirs]:
                path = here / name
                kind = self._kind(path)
                if kind is not None and kind != "folder":
                    out[path.relative_to(self.root).as_posix()] = kind
        return out

    @staticmethod
    def _kind(path: Path) -> str | None:
        try:
            mode = path.lstat().st_mode
        except (FileNotFoundError, NotADirectoryError):  # afile/release.json: no release there
            return None
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:  # a name no file system holds: no release there either
                return None
            raise
        if stat.S_ISLNK(mode):
            return "symlink"
        return "file" if stat.S_ISREG(mode) else "folder" if stat.S_ISDIR(mode) else "special file"

    def chunks(self, rel: str) -> Iterator[bytes]:
        fd = os.open(self.root / rel, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise OSError(f"{rel} is not a regular file")
            yield from iter(lambda: f.read(1 << 20), b"")

    def size(self, rel: str) -> int:
        return (self.root / rel).lstat().st_size


class RemoteRelease:
    """A release under an fsspec URL (s3://...): object stores hold no links."""

    def __init__(self, url: str) -> None:
        self.location = url.rstrip("/")
        self.fs, self.base = filesystem(self.location)

    def listing(self, under: str | None = None) -> dict[str, str]:
        out: dict[str, str] = {}
        for path, info in self.fs.find(self.base, detail=True).items():
            rel = path[len(self.base) :].lstrip("/")
            if rel and (under is None or rel in _TOP or rel.split("/", 1)[0] == under):
                out[rel] = "symlink" if info.get("islink") else "file" if info.get("type") == "file" else "special file"
        return out

    def chunks(self, rel: str) -> Iterator[bytes]:
        with self.fs.open(f"{self.base}/{rel}", "rb") as f:
            yield from iter(lambda: f.read(1 << 20), b"")

    def size(self, rel: str) -> int:
        return int(self.fs.size(f"{self.base}/{rel}"))


def open_release(location: str) -> LocalRelease | RemoteRelease:
    """The release at ``location`` (a folder, ``file://`` folder, or another fsspec URL)."""
    given, location = location, location.removeprefix("file://")
    if not location.strip():  # `verify "$DIR"` with DIR unset: not the current folder
        raise UserError(f"{given!r}: empty; give the release folder (holding {RELEASE_FILE}) or its URL.")
    if "://" in location:
        return RemoteRelease(location)
    root = Path(location)
    try:
        is_dir = root.is_dir()
    except (OSError, ValueError) as exc:  # a name too long, a NUL: the OS refuses to look
        raise UserError(
            f"{location[:300]}: cannot use it ({getattr(exc, 'strerror', None) or exc}); "
            f"pass the release folder (the one holding {RELEASE_FILE}) or its URL."
        ) from None
    if not is_dir:
        raise UserError(f"{location}: no release folder there (expected a folder holding {RELEASE_FILE}).")
    return LocalRelease(root)


def _read_bounded(release: LocalRelease | RemoteRelease, rel: str, limit: int) -> bytes:
    if release.size(rel) > limit:
        raise ValueError(f"over {limit:,} bytes; refused before reading")
    data = b"".join(release.chunks(rel))
    if len(data) > limit:
        raise ValueError(f"over {limit:,} bytes")
    return data


def _checked_files(body: dict[str, Any]) -> dict[str, tuple[str, int]]:
    cells = body.get("cells")
    files = body.get("files")
    if body.get("format") != FORMAT or not isinstance(cells, dict) or not isinstance(files, dict):
        raise ValueError(f"not an rbln-build release (format {body.get('format')!r}, expected {FORMAT!r})")
    for cid in cells:
        if not isinstance(cid, str) or not _NAME.fullmatch(cid) or ".." in cid:
            raise ValueError(f"cell id {cid!r} is not a safe folder name (letters, digits and . _ + -)")
    out = {}
    for rel, digest in files.items():
        parts = PurePosixPath(rel).parts
        if (
            not isinstance(rel, str)
            or rel.startswith("/")
            or "\\" in rel
            or len(parts) < 2
            or any(p in ("", ".", "..") for p in parts)
            or PurePosixPath(*parts).as_posix() != rel
            or parts[0] not in cells
        ):
            raise ValueError(f"file entry {rel!r} is not a path inside a released cell's folder")
        sha, size = (digest or {}).get("sha256"), (digest or {}).get("size")
        if not isinstance(sha, str) or not _SHA.fullmatch(sha) or not isinstance(size, int) or size < 0:
            raise ValueError(f"file entry {rel!r} has no valid sha256 and size")
        out[rel] = (sha, size)
    return out


def verify_release(location: str, key: Path | None = None) -> Verdict:
    """Check the release at ``location``; ``key``: an Ed25519 public key (PEM) its signature must match.
    (A lone cell's folder: ``_lone.verify_location``.)"""
    release = open_release(location)
    try:
        return _verify(release, key)
    except UserError:
        raise
    except Exception as exc:  # an unreachable remote, refused credentials: no verdict at all
        if isinstance(release, LocalRelease):
            raise
        from ._format import redact

        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
        raise UserError(
            f"{redact(release.location)}: cannot be read ({why}); check the URL and the credentials in the environment."
        ) from None


def _check_listed(
    release: LocalRelease | RemoteRelease,
    present: dict[str, str],
    listed: dict[str, tuple[str, int]],
    verdict: Verdict,
    against: str = RELEASE_FILE,
) -> None:
    """Every listed file there, a regular file of its size and sha256; nothing else but ``_TOP``."""
    problems = verdict.problems
    for rel in sorted(set(present) - set(listed) - _TOP):
        kind = "an extra file" if present[rel] == "file" else f"a {present[rel]}"
        problems.append((rel, f"{kind}, not in {against}"))
    for rel, (sha, size) in sorted(listed.items()):
        what = present.get(rel)
        if what is None:
            problems.append((rel, "missing"))
            continue
        if what != "file":
            problems.append((rel, f"a {what} where {against} lists a file"))
            continue
        h = hashlib.sha256()
        got = 0
        try:
            for chunk in release.chunks(rel):
                h.update(chunk)
                got += len(chunk)
        except OSError as exc:
            problems.append((rel, f"unreadable ({exc})"))
            continue
        if got != size:
            problems.append((rel, f"changed: {got:,} bytes, {against} says {size:,}"))
        elif h.hexdigest() != sha:
            problems.append((rel, f"changed: sha256 {h.hexdigest()}, {against} says {sha}"))
        verdict.files += 1
        verdict.total_bytes += got
    problems.sort()


def _no_such_cell(folder: Path) -> None:
    """A cell folder that is not there under a release: a mistyped name (UserError with the closest
    names), not a damaged release; a release.json that does not read is left to ``_verify`` to name."""
    import difflib

    from .._documents import load_json

    try:
        body = load_json(folder.parent / RELEASE_FILE, limit=MAX_RELEASE_JSON_BYTES)
    except UserError:
        return
    cells = sorted(c for c in (body.get("cells") if isinstance(body, dict) else None) or {} if isinstance(c, str))
    if not cells or folder.name in cells:
        return
    close = difflib.get_close_matches(folder.name, cells, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}?" if close else f"it has {len(cells)}, e.g. {', '.join(cells[:3])}."
    raise UserError(f"{folder}: no such cell in the release {folder.parent}; {hint}")


def _verify(release: LocalRelease | RemoteRelease, key: Path | None, only: str | None = None) -> Verdict:
    verdict = Verdict(release.location)
    problems = verdict.problems
    try:
        present = release.listing(only)
    except FileNotFoundError:
        present = {}
    kind = present.get(RELEASE_FILE)
    if kind != "file":
        problems.append((RELEASE_FILE, "missing: not a release, or it was deleted" if kind is None else f"a {kind}"))
        return verdict
    data = b""
    try:
        data = _read_bounded(release, RELEASE_FILE, MAX_RELEASE_JSON_BYTES)
        body = json.loads(data)
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
        if body.get(SELF_HASH_KEY) != self_hash(body):
            raise ValueError(f"edited: its {SELF_HASH_KEY} does not match its content")
        if render_release(body) != data:  # the hash covers the parsed body: the bytes must be its rendering
            raise ValueError("edited: its bytes are not the rendering its content_sha256 covers (a duplicate key?)")
        listed = _checked_files(body)
    except (OSError, ValueError, RecursionError) as exc:  # nothing else can be checked against it
        problems.append((RELEASE_FILE, str(exc)))
        return verdict
    verdict.name = body.get("name") if isinstance(body.get("name"), str) else None
    verdict.cells = len(body.get("cells") or {})
    if only is not None:  # one cell: its files only; the signature is verify --key's
        if only not in body["cells"]:
            problems.append((only, f"not a cell of {RELEASE_FILE} (it lists {verdict.cells})"))
            return verdict
        listed = {rel: v for rel, v in listed.items() if rel.split("/", 1)[0] == only}
        verdict.cells = 1
    else:
        _check_signature(release, present, data, key, verdict)
    _check_listed(release, present, listed, verdict)
    return verdict


def _check_signature(
    release: LocalRelease | RemoteRelease, present: dict[str, str], data: bytes, key: Path | None, verdict: Verdict
) -> None:
    kind = present.get(SIGNATURE_FILE)
    if kind is None:
        if key is not None:
            verdict.signature = "bad"
            verdict.problems.append((SIGNATURE_FILE, f"missing: --key {key} asks for a signed release"))
        return
    if kind != "file":
        verdict.signature = "bad"
        verdict.problems.append((SIGNATURE_FILE, f"a {kind}"))
        return
    if key is None:
        verdict.signature = "unchecked"
        return
    from ._sign import SIGNATURE_BYTES, signature_ok

    try:
        signature = _read_bounded(release, SIGNATURE_FILE, SIGNATURE_BYTES)
    except (OSError, ValueError) as exc:
        signature = b""
        verdict.problems.append((SIGNATURE_FILE, str(exc)))
    if signature_ok(data, signature, key):
        verdict.signature = "ok"
    else:
        verdict.signature = "bad"
        verdict.problems.append(
            (
                RELEASE_FILE,
                f"its signature ({SIGNATURE_FILE}) does not verify with {key}: release.json or the signature was changed, or another key signed it",
            )
        )
