"""Where two versions of one file differ, in the file's own terms: a JSON key path, a member of a
zip archive (a torch program, ``.pt2``), a tensor of a safetensors file, a line of a text file (a
model card), else a byte offset.

Pure functions over two local files; nothing here is trusted: a file that does not parse as its
name says is compared as bytes, and every read is bounded.
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path
from typing import Any

__all__ = ["json_difference", "where_inside"]

MAX_PARSED_BYTES = 64 * 2**20  # JSON parsed for a key path; above that, a byte offset
_SAFETENSORS_HEADER_MAX = 100 * 2**20
_TEXT = (".md", ".txt", ".yaml", ".yml", ".jinja", ".py")


def _key(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def json_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The key path of the first difference between two JSON values (keys sorted, lists by index),
    with both values when they are scalars; None when they are equal (a bool is not an int)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in b:
                return f"{_key(path, key)} (only in the release)"
            if key not in a:
                return f"{_key(path, key)} (only in the rebuild)"
            found = json_difference(a[key], b[key], _key(path, key))
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            found = json_difference(x, y, f"{path}[{i}]")
            if found is not None:
                return found
        if len(a) != len(b):
            return f"{path or '(top)'} ({len(a)} items in the release, {len(b)} in the rebuild)"
        return None
    if type(a) is type(b) and a == b:
        return None
    return f"{path or '(top)'}: {_short(a)} in the release, {_short(b)} in the rebuild"


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _first_byte(a: Path, b: Path) -> str:
    offset = 0
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 16), fb.read(1 << 16)
            if x != y:
                n = next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))
                return f"from byte {offset + n:,}"
            if not x:
                return "the same bytes"
            offset += len(x)


def _text_inside(a: Path, b: Path) -> str | None:
    if max(a.stat().st_size, b.stat().st_size) > MAX_PARSED_BYTES:
        return None
    try:
        la = a.read_text(encoding="utf-8").splitlines()
        lb = b.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        return None
    for i, (x, y) in enumerate(zip(la, lb, strict=False)):
        if x != y:
            col = next((j for j, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))
            start = max(0, col - 20)
            return (
                f"line {i + 1}, column {col + 1}: {_short(x[start : col + 40])} in the release, "
                f"{_short(y[start : col + 40])} in the rebuild"
            )
    if len(la) != len(lb):
        return f"line {min(len(la), len(lb)) + 1} ({len(la)} lines in the release, {len(lb)} in the rebuild)"
    return "the same lines, other bytes (line endings)"


def _json_inside(a: Path, b: Path) -> str | None:
    if max(a.stat().st_size, b.stat().st_size) > MAX_PARSED_BYTES:
        return None
    try:
        va, vb = json.loads(a.read_bytes()), json.loads(b.read_bytes())
    except (ValueError, RecursionError):
        return None
    found = json_difference(va, vb)
    return f"at {found}" if found is not None else "the same JSON value, other bytes (formatting)"


def _zip_inside(a: Path, b: Path) -> str | None:
    try:
        with zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
            ia = {i.filename: i for i in za.infolist()}
            ib = {i.filename: i for i in zb.infolist()}
            for name in sorted(set(ia) | set(ib)):
                if name not in ib:
                    return f"archive member {name} (only in the release)"
                if name not in ia:
                    return f"archive member {name} (only in the rebuild)"
                if (ia[name].CRC, ia[name].file_size) != (ib[name].CRC, ib[name].file_size):
                    return f"archive member {name}"
            if [i.filename for i in za.infolist()] != [i.filename for i in zb.infolist()]:
                return "the archive's member order"
            return "the archive's metadata (every member's content is the same)"
    except (zipfile.BadZipFile, OSError, ValueError):
        return None


def _safetensors_header(path: Path) -> tuple[int, dict[str, Any]] | None:
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            return None
        (n,) = struct.unpack("<Q", head)
        if n > _SAFETENSORS_HEADER_MAX:
            return None
        header = json.loads(f.read(n))
    return (8 + n, header) if isinstance(header, dict) else None


def _safetensors_inside(a: Path, b: Path) -> str | None:
    try:
        ha, hb = _safetensors_header(a), _safetensors_header(b)
    except (OSError, ValueError, RecursionError):
        return None
    if ha is None or hb is None:
        return None
    (sa, ta), (sb, tb) = ha, hb
    with open(a, "rb") as fa, open(b, "rb") as fb:
        for name in sorted((set(ta) | set(tb)) - {"__metadata__"}):
            if name not in tb:
                return f"tensor {name} (only in the release)"
            if name not in ta:
                return f"tensor {name} (only in the rebuild)"
            x, y = ta[name], tb[name]
            if not isinstance(x, dict) or not isinstance(y, dict):
                return f"tensor {name}'s header entry"
            if (x.get("dtype"), x.get("shape")) != (y.get("dtype"), y.get("shape")):
                return f"tensor {name} (dtype/shape {x.get('dtype')} {x.get('shape')} vs {y.get('dtype')} {y.get('shape')})"
            try:
                (a0, a1), (b0, b1) = x["data_offsets"], y["data_offsets"]
            except (KeyError, TypeError, ValueError):
                return f"tensor {name}'s header entry"
            fa.seek(sa + int(a0))
            fb.seek(sb + int(b0))
            if fa.read(int(a1) - int(a0)) != fb.read(int(b1) - int(b0)):
                return f"tensor {name}"
    if ta.get("__metadata__") != tb.get("__metadata__"):
        return "the file's __metadata__"
    return "the header's layout (every tensor is the same)"


def where_inside(release_copy: Path, rebuilt: Path) -> str:
    """Where ``rebuilt`` first differs from ``release_copy`` (both local files of one name)."""
    name = rebuilt.name
    inside: str | None = None
    if name.endswith(".json"):
        inside = _json_inside(release_copy, rebuilt)
    elif name.endswith((".pt2", ".zip", ".pt")) or zipfile.is_zipfile(rebuilt):
        inside = _zip_inside(release_copy, rebuilt)
    elif name.endswith(".safetensors"):
        inside = _safetensors_inside(release_copy, rebuilt)
    elif name.endswith(_TEXT):
        inside = _text_inside(release_copy, rebuilt)
    sizes = f"{release_copy.stat().st_size:,} bytes in the release, {rebuilt.stat().st_size:,} rebuilt"
    return f"{inside or _first_byte(release_copy, rebuilt)} ({sizes})"
