"""``release.json``'s names and bytes, shared by the writer and the verifier (no heavy imports).

``release.json`` carries ``content_sha256``: the sha256 of its own rendering without that key. It
catches an edit of ``release.json`` that was not made by rbln-build (a changed count, a removed
file entry); it cannot catch an edit that recomputes it, which is what the optional Ed25519
signature (``release.json.sig``) is for.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = [
    "filesystem",
    "CARD_FILE",
    "CELL_FILES",
    "CELL_FORMAT",
    "HUB_BOOKKEEPING",
    "FORMAT",
    "MAX_RELEASE_JSON_BYTES",
    "RELEASE_FILE",
    "SELF_HASH_KEY",
    "SIGNATURE_FILE",
    "render_release",
    "redact",
    "self_hash",
]

FORMAT = "rbln-build/release/1"
RELEASE_FILE = "release.json"
SIGNATURE_FILE = "release.json.sig"  # a detached Ed25519 signature of release.json's bytes (64 bytes)
CARD_FILE = "README.md"
# A released cell's own integrity file: every other file of the cell folder (size, sha256) and its
# self-hash, so a cell that travels alone (a Hub repo, a copied folder) is checked without release.json.
CELL_FILES = "rbln-build-files.json"
CELL_FORMAT = "rbln-build/cell-files/1"
# What the Hub and its client add to a cell uploaded as a repo: not part of the cell, never loaded.
HUB_BOOKKEEPING = (".gitattributes", ".cache/huggingface/")
SELF_HASH_KEY = "content_sha256"
MAX_RELEASE_JSON_BYTES = 256 * 2**20  # a 10,000-cell release is ~40 MB; more is refused before it is read


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))


def _render(body: dict[str, Any]) -> bytes:
    """Sorted keys; a top-level mapping one line per entry (a cell, a file): readable, diffable, and
    rendered by json's C encoder (indenting every level would take ~10x longer for 1,000 cells)."""
    lines = []
    for key in sorted(body):
        value = body[key]
        if isinstance(value, dict) and value:
            inner = ",\n".join(f"  {_dump(k)}: {_dump(value[k])}" for k in sorted(value))
            lines.append(f" {_dump(key)}: {{\n{inner}\n }}")
        else:
            lines.append(f" {_dump(key)}: {_dump(value)}")
    return ("{\n" + ",\n".join(lines) + "\n}\n").encode("utf-8")


def self_hash(body: dict[str, Any]) -> str:
    """sha256 of ``body`` rendered without its own ``content_sha256``."""
    rest = {k: v for k, v in body.items() if k != SELF_HASH_KEY}
    return hashlib.sha256(_render(rest)).hexdigest()


def render_release(body: dict[str, Any]) -> bytes:
    """release.json's bytes: sorted keys, no timestamps, its self-hash included."""
    return _render({**body, SELF_HASH_KEY: self_hash(body)})


def redact(url: str) -> str:
    """The URL without any user:password part (never printed)."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        rest = rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` and its base path; one UserError when it cannot be used."""
    from ..errors import UserError
    from ..store import REMOTE_TIMEOUTS

    try:
        import fsspec  # type: ignore[import-untyped]

        fs, base = fsspec.url_to_fs(url, **REMOTE_TIMEOUTS.get(url.split("://", 1)[0], {}))
    except ImportError as exc:
        raise UserError(
            f"{redact(url)}: needs a filesystem package that is not installed ({exc}); "
            "install it with: pip install 'rbln-build[remote]'"
        ) from None
    except ValueError as exc:
        raise UserError(f"{redact(url)}: not a usable fsspec URL ({exc}).") from None
    return fs, base.rstrip("/")
