"""What changed between two manifests (or releases), cell by cell (``rbln-build diff`` and
``report --compare``).

For every cell in both: a changed ``kvcache_num_blocks``, budget (as configured, and in bytes),
floor (``num_min_blocks``), full pool (``num_full_blocks``), status, compile key, build options and
toolchain. A cell whose budget was edited has a new id (the id names the budget): it is paired with
its old self (same model, device, NPU, recipe, build options and explicit block count; several edits
of one such cell pair in budget order) and shown as a change of budget, not as a removed and an added
cell. Likewise a cell whose build options the matrix sets changed (``matrix.batch_sizes=[4]`` after
``[8]``: ``...bs8.b0.3`` became ``...bs4.b0.3``): paired by model, device and budget and shown as
"options changed: batch_size 8 -> 4". ``cell_rows`` makes one row per cell with its deltas (blocks,
bytes per device), largest change first: the text, Markdown and HTML views all show those rows.

A release's ``release.json`` is read as the manifest of its released cells (``cells_of``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["FIELDS", "budget_edits", "cells_of", "diff_manifests", "document_path", "option_edits"]

RELEASE_FORMATS = "rbln-build/release/"  # release.json's "format" (rbln_build.release.FORMAT) starts so

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


def document_path(path: Path) -> Path:
    """``path``, or for a folder the ``release.json`` (a release) or ``manifest.json`` (a build) in it.
    A path the OS refuses to look at (too long, a loop) is returned as is, for the reader to report."""
    try:
        if not path.is_dir():
            return path
    except (OSError, ValueError):
        return path
    return next((path / n for n in ("release.json", "manifest.json") if (path / n).is_file()), path / "manifest.json")


def cells_of(document: Any) -> tuple[dict[str, Any], str] | None:
    """(cells, "manifest" | "release") of a parsed manifest or ``release.json`` (whose cells are
    ``{"dir", "record"}``: the record is the cell's manifest entry); None when it is neither."""
    if not isinstance(document, dict) or not isinstance(document.get("cells"), dict):
        return None
    if str(document.get("format") or "").startswith(RELEASE_FORMATS):
        cells = {cid: (c or {}).get("record") if isinstance(c, dict) else None for cid, c in document["cells"].items()}
        return cells, "release"
    return document["cells"], "manifest"


_PLACE = ("model", "recipe", "device", "npu", "num_devices", "backend", "kvcache_num_blocks")


def _place(entry: dict[str, Any]) -> str | None:
    """Where a cell sits apart from its build options: model, device, budget (typed), explicit count."""
    inputs = entry.get("inputs") or {}
    if not isinstance(inputs, dict) or not inputs.get("model"):
        return None
    budget = inputs.get("memory_budget")
    return json.dumps([*(inputs.get(k) for k in _PLACE), type(budget).__name__, budget], sort_keys=True, default=str)


def _options(entry: dict[str, Any]) -> Any:
    return (entry.get("inputs") or {}).get("build_options")


def option_edits(old: dict[str, Any], new: dict[str, Any], removed: list[str], added: list[str]) -> dict[str, str]:
    """{new id: old id} for the removed and added cells that are one cell (model, device, budget)
    whose build options changed: as many removed as added (paired in the order of their options)."""
    groups: dict[str, tuple[list[str], list[str]]] = {}
    for cells, ids, side in ((old, removed, 0), (new, added, 1)):
        for cid in ids:
            place = _place(cells[cid])
            if place is not None:
                groups.setdefault(place, ([], []))[side].append(cid)
    pairs: dict[str, str] = {}
    for gone, came in groups.values():
        if gone and len(gone) == len(came):
            by_old = sorted(gone, key=lambda c: (json.dumps(_options(old[c]), sort_keys=True, default=str), c))
            by_new = sorted(came, key=lambda c: (json.dumps(_options(new[c]), sort_keys=True, default=str), c))
            pairs.update(zip(by_new, by_old, strict=True))
    return pairs


def diff_manifests(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """{"added": [...], "removed": [...], "budget_edits": {new id: old id}, "option_edits": {new id:
    old id}, "changed": {cell: {field: [old, new]}}, "counts_changed": bool}; an edit's changes are
    under its new id, and its cells are in neither "added" nor "removed"."""
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    edits = budget_edits(old, new, removed, added)
    added = [cid for cid in added if cid not in edits]
    removed = [cid for cid in removed if cid not in set(edits.values())]
    options = option_edits(old, new, removed, added)
    added = [cid for cid in added if cid not in options]
    removed = [cid for cid in removed if cid not in set(options.values())]
    was = {**edits, **options}
    changed: dict[str, dict[str, list[Any]]] = {}
    for cid in sorted((set(old) & set(new)) | set(was)):
        a, b = old[was.get(cid, cid)], new[cid]
        fields = {name: [a.get(name), b.get(name)] for name, _ in FIELDS if not _same(a.get(name), b.get(name))}
        for key, name in (("build_options", "options"), ("toolchain", "toolchain")):
            va, vb = (a.get("inputs") or {}).get(key), (b.get("inputs") or {}).get(key)
            if va != vb:
                fields[name] = [va, vb]
        if fields:
            changed[cid] = fields
    counts = any("kvcache_num_blocks" in f for f in changed.values()) or any(
        (old if cid in removed else new)[cid].get("kvcache_num_blocks") is not None for cid in added + removed
    )
    return {
        "added": added,
        "removed": removed,
        "budget_edits": edits,
        "option_edits": options,
        "changed": changed,
        "counts_changed": counts,
    }
