"""``rbln-build diff OLD.json NEW.json [--json]``: two manifests compared cell by cell, for review.

Reports cells added and removed, and for every cell in both: a changed ``kvcache_num_blocks``,
budget (as configured, and in bytes), floor (``num_min_blocks``), full pool (``num_full_blocks``),
status, compile key, and toolchain; a cell whose budget was edited is paired with its old self and
shown as a change of budget (``rbln_build.reporting._changes``, shared with ``report --compare``).
Exit status: 1 when a resolved count changed (a cell's ``kvcache_num_blocks`` differs, or a cell
with a count was added or removed; the last line says which), so CI can demand a review; 0 otherwise; 2 when a file is not a
manifest.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .._documents import load_json
from ..errors import InputError
from ..reporting import FIELDS, diff_manifests

__all__ = ["diff_manifests", "main"]


def load_manifest(path: Path) -> dict[str, Any]:
    """The ``cells`` of the manifest at ``path``, read with a size cap and checked for shape; anything
    else is an InputError naming the file (exit 2)."""
    hint = "give the path of a manifest.json"
    data = load_json(path, hint=hint)
    if not isinstance(data, dict) or not isinstance(data.get("cells"), dict):
        raise InputError(f"{path}: not an rbln-build manifest (no 'cells' mapping); {hint}.")
    for cid, entry in data["cells"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("inputs") or {}, dict):
            raise InputError(
                f"{path}: cells.{cid[:80]} is not a manifest entry (expected a mapping with an 'inputs' mapping, "
                f"got {json.dumps(entry)[:60]}); {hint}."
            )
    return data["cells"]  # type: ignore[no-any-return]


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
    edits = d.get("budget_edits") or {}
    for cid, fields in d["changed"].items():
        shown = f"{edits[cid]} -> {cid}" if cid in edits else cid
        for name, (a, b) in fields.items():
            rows.append((shown, labels[name], _show(a), _show(b)))
    if len(rows) == 1:
        return "no differences: the same cells with the same counts, budgets, keys and toolchain."
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    by_edit = f" ({len(edits)} by a budget edit)" if edits else ""
    lines.append(
        f"{len(d['added'])} added, {len(d['removed'])} removed, {len(d['changed'])} changed{by_edit}; "
        + (
            f"resolved counts changed ({_why(d, old, new)}): review before release."
            if d["counts_changed"]
            else "no resolved count changed."
        )
    )
    return "\n".join(lines)


def _why(d: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> str:
    """Which resolved counts changed: counts of cells in both, added cells with one, removed cells with one."""
    changed = sum("kvcache_num_blocks" in fields for fields in d["changed"].values())
    added = sum(new[cid].get("kvcache_num_blocks") is not None for cid in d["added"])
    removed = sum(old[cid].get("kvcache_num_blocks") is not None for cid in d["removed"])
    parts = [
        f"{changed:,} count{'' if changed == 1 else 's'} changed" if changed else "",
        f"{added:,} added cell{' has' if added == 1 else 's have'} a count" if added else "",
        f"{removed:,} removed cell{'' if removed == 1 else 's'} had a count" if removed else "",
    ]
    return ", ".join(p for p in parts if p)


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
