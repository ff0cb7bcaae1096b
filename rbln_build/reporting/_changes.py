"""What changed between two manifests, cell by cell (``rbln-build diff`` and ``report --compare``).

For every cell in both: a changed ``kvcache_num_blocks``, budget (as configured, and in bytes),
floor (``num_min_blocks``), full pool (``num_full_blocks``), status, compile key, and toolchain.
A cell whose budget was edited has a new id (the id names the budget): it is paired with its old
self (same model, device, NPU, recipe, build options and explicit block count; several edits of one
such cell pair in budget order) and shown as a change of budget, not as a removed and an added cell.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["FIELDS", "budget_edits", "diff_manifests"]

FIELDS = (
    ("kvcache_num_blocks", "blocks"),
    ("memory_budget", "budget"),
    ("budget_bytes", "budget bytes"),
    ("num_min_blocks", "floor"),
    ("num_full_blocks", "full pool"),
    ("status", "status"),
    ("compile_key", "compile key"),
)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # a budget of 1 (one byte) is not 1.0 (100%)


_IDENTITY = ("model", "recipe", "device", "npu", "num_devices", "backend", "build_options", "kvcache_num_blocks")


def _identity(entry: dict[str, Any]) -> str | None:
    """What a cell is apart from its budget (None: too little recorded to tell)."""
    inputs = entry.get("inputs") or {}
    if not isinstance(inputs, dict) or not inputs.get("model"):
        return None
    return json.dumps([inputs.get(k) for k in _IDENTITY], sort_keys=True, default=str)


def _by_budget(cells: dict[str, Any]) -> Any:
    return lambda cid: (cells[cid].get("budget_bytes") is None, cells[cid].get("budget_bytes") or 0, cid)


def budget_edits(old: dict[str, Any], new: dict[str, Any], removed: list[str], added: list[str]) -> dict[str, str]:
    """{new id: old id} for the removed and added cells that are one cell with an edited budget: the
    same identity, as many removed as added (paired in budget order)."""
    groups: dict[str, tuple[list[str], list[str]]] = {}
    for cells, ids, side in ((old, removed, 0), (new, added, 1)):
        for cid in ids:
            ident = _identity(cells[cid])
            if ident is not None:
                groups.setdefault(ident, ([], []))[side].append(cid)
    pairs: dict[str, str] = {}
    for gone, came in groups.values():
        if gone and len(gone) == len(came):
            for a, b in zip(sorted(gone, key=_by_budget(old)), sorted(came, key=_by_budget(new)), strict=True):
                pairs[b] = a
    return pairs


def diff_manifests(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """{"added": [...], "removed": [...], "budget_edits": {new id: old id},
    "changed": {cell: {field: [old, new]}}, "counts_changed": bool}; a budget edit's changes are
    under its new id, and its cells are in neither "added" nor "removed"."""
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    edits = budget_edits(old, new, removed, added)
    added = [cid for cid in added if cid not in edits]
    removed = [cid for cid in removed if cid not in set(edits.values())]
    changed: dict[str, dict[str, list[Any]]] = {}
    for cid in sorted((set(old) & set(new)) | set(edits)):
        a, b = old[edits.get(cid, cid)], new[cid]
        fields = {name: [a.get(name), b.get(name)] for name, _ in FIELDS if not _same(a.get(name), b.get(name))}
        ta, tb = (a.get("inputs") or {}).get("toolchain"), (b.get("inputs") or {}).get("toolchain")
        if ta != tb:
            fields["toolchain"] = [ta, tb]
        if fields:
            changed[cid] = fields
    counts = any("kvcache_num_blocks" in f for f in changed.values()) or any(
        (old if cid in removed else new)[cid].get("kvcache_num_blocks") is not None for cid in added + removed
    )
    return {"added": added, "removed": removed, "budget_edits": edits, "changed": changed, "counts_changed": counts}
