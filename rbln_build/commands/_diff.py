"""``rbln-build diff OLD.json NEW.json [--json]``: two manifests compared cell by cell, for review.

Reports cells added and removed, and for every cell in both: a changed ``kvcache_num_blocks``,
budget (as configured, and in bytes), floor (``num_min_blocks``), full pool (``num_full_blocks``),
status, compile key, and toolchain. Exit status: 1 when a resolved count changed (a cell's
``kvcache_num_blocks`` differs, or a cell with a count was added or removed), so CI can demand a
review; 0 otherwise; 2 when a file is not a manifest.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["diff_manifests", "main"]

FIELDS = (
    ("kvcache_num_blocks", "blocks"),
    ("memory_budget", "budget"),
    ("budget_bytes", "budget bytes"),
    ("num_min_blocks", "floor"),
    ("num_full_blocks", "full pool"),
    ("status", "status"),
    ("compile_key", "compile key"),
)


def load_manifest(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_bytes())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror}); give the path of a manifest.json.") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON ({exc}); give the path of a manifest.json.") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), dict):
        raise ConfigError(f"{path}: not an rbln-build manifest (no 'cells' mapping).")
    return data["cells"]  # type: ignore[no-any-return]


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # a budget of 1 (one byte) is not 1.0 (100%)


def diff_manifests(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """{"added": [...], "removed": [...], "changed": {cell: {field: [old, new]}}, "counts_changed": bool}"""
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    changed: dict[str, dict[str, list[Any]]] = {}
    for cid in sorted(set(old) & set(new)):
        a, b = old[cid], new[cid]
        fields = {name: [a.get(name), b.get(name)] for name, _ in FIELDS if not _same(a.get(name), b.get(name))}
        ta, tb = (a.get("inputs") or {}).get("toolchain"), (b.get("inputs") or {}).get("toolchain")
        if ta != tb:
            fields["toolchain"] = [ta, tb]
        if fields:
            changed[cid] = fields
    counts = any("kvcache_num_blocks" in f for f in changed.values()) or any(
        (old if cid in removed else new)[cid].get("kvcache_num_blocks") is not None for cid in added + removed
    )
    return {"added": added, "removed": removed, "changed": changed, "counts_changed": counts}


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items()))
    if isinstance(value, str) and len(value) == 64:
        return value[:12]  # a key
    return (
        f"{value:,}"
        if isinstance(value, int) and not isinstance(value, bool)
        else repr(value)
        if isinstance(value, float)
        else str(value)
    )


def render(d: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> str:
    labels = dict(FIELDS) | {"toolchain": "toolchain"}
    rows = [("cell", "change", "old", "new")]
    for cid in d["added"]:
        rows.append(
            (cid, "added", "", f"{_show(new[cid].get('kvcache_num_blocks'))} blocks ({new[cid].get('status')})")
        )
    for cid in d["removed"]:
        rows.append(
            (cid, "removed", f"{_show(old[cid].get('kvcache_num_blocks'))} blocks ({old[cid].get('status')})", "")
        )
    for cid, fields in d["changed"].items():
        for name, (a, b) in fields.items():
            rows.append((cid, labels[name], _show(a), _show(b)))
    if len(rows) == 1:
        return "no differences: the same cells with the same counts, budgets, keys and toolchain."
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(
        f"{len(d['added'])} added, {len(d['removed'])} removed, {len(d['changed'])} changed; "
        + ("resolved counts changed: review before release." if d["counts_changed"] else "no resolved count changed.")
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    paths = [a for a in argv if a != "--json"]
    if len(paths) != 2 or any(p.startswith("-") for p in paths):
        print("usage: rbln-build diff OLD.json NEW.json [--json]   compare two manifests cell by cell", file=sys.stderr)
        return 2
    old, new = load_manifest(Path(paths[0])), load_manifest(Path(paths[1]))
    d = diff_manifests(old, new)
    print(json.dumps(d, indent=2, sort_keys=True) if as_json else render(d, old, new))
    return 1 if d["counts_changed"] else 0
