"""``rbln-build diff OLD NEW [--json | --format text|markdown|json]``: two manifests or releases
compared cell by cell, for review.

OLD and NEW are each a ``manifest.json``, a release's ``release.json`` (its released cells' records),
or a folder holding one (a release folder, a build directory). Reports one row per changed cell
with its deltas, largest change first (``rbln_build.reporting``: a budget edit or a change of the
build options the matrix sets is paired with the cell's old self), then the cells added and removed.
``--format markdown`` prints the same as a Markdown table for a PR comment.
Exit status: 1 when a resolved count changed (a cell's ``kvcache_num_blocks`` differs, or a cell
with a count was added or removed; the last line says which), so CI can demand a review; 0 otherwise;
2 when a file is not a manifest or a release.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .._documents import load_json
from ..errors import InputError, UserError
from ..reporting import cell_rows, cells_of, diff_manifests, document_path, markdown_rows, text_rows

__all__ = ["diff_manifests", "main"]


def load_manifest(path: Path) -> dict[str, Any]:
    """The cells of the manifest or release at ``path`` (a file, or a folder holding release.json or
    manifest.json), read with a size cap and checked for shape; anything else is an InputError naming
    the file (exit 2)."""
    hint = "give a manifest.json, a release.json, or the folder holding one"
    path = document_path(path)
    found = cells_of(load_json(path, hint=hint, limit=256 * 2**20))
    if found is None:
        raise InputError(f"{path}: not an rbln-build manifest or release (no 'cells' mapping); {hint}.")
    cells = found[0]
    for cid, entry in cells.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("inputs") or {}, dict):
            raise InputError(
                f"{path}: cells.{cid[:80]} is not a manifest entry (expected a mapping with an 'inputs' mapping, "
                f"got {json.dumps(entry)[:60]}); {hint}."
            )
    return cells


def _verdict(d: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> str:
    edits = [
        f"{len(d[k])} by {what}"
        for k, what in (("budget_edits", "a budget edit"), ("option_edits", "an options change"))
        if d.get(k)
    ]
    by_edit = f" ({', '.join(edits)})" if edits else ""
    return f"{len(d['added'])} added, {len(d['removed'])} removed, {len(d['changed'])} changed{by_edit}; " + (
        f"resolved counts changed ({_why(d, old, new)}): review before release."
        if d["counts_changed"]
        else "no resolved count changed."
    )


def render(d: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> str:
    rows = cell_rows(d, old, new)
    if not rows:
        return "no differences: the same cells with the same counts, budgets, options, keys and toolchain."
    return "\n".join([*text_rows(rows), _verdict(d, old, new)])


def render_markdown(d: dict[str, Any], old: dict[str, Any], new: dict[str, Any], names: tuple[str, str]) -> str:
    """A PR comment: a heading, the verdict, one table row per changed cell."""
    rows = cell_rows(d, old, new)
    head = [f"### rbln-build diff: `{names[0]}` → `{names[1]}`", ""]
    if not rows:
        return "\n".join(
            [*head, "No differences: the same cells with the same counts, budgets, options, keys and toolchain.", ""]
        )
    verdict = _verdict(d, old, new)
    verdict = f"**{verdict}**" if d["counts_changed"] else verdict
    return "\n".join([*head, verdict, "", *markdown_rows(rows), ""])


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


USAGE = "usage: rbln-build diff OLD NEW [--json | --format text|markdown|json]   manifests or releases, cell by cell"


def main(argv: list[str]) -> int:
    fmt, paths = "text", []
    args = iter(argv)
    for a in args:
        if a == "--json":
            fmt = "json"
        elif a == "--format" or a.startswith("--format="):
            fmt = a.split("=", 1)[1] if "=" in a else next(args, "")
            if fmt not in ("text", "markdown", "json"):
                raise UserError(
                    f"--format {fmt[:100]!r}: use text, markdown or json (rbln-build diff OLD NEW --format markdown)."
                )
        elif a.startswith("-") and a != "-":
            raise UserError(
                f"unknown option {a[:100]!r}: diff takes OLD NEW and --json or --format text|markdown|json."
            )
        else:
            paths.append(a)
    if len(paths) != 2:
        got = ", ".join(repr(p[:100]) for p in paths[:4]) or "none"
        raise UserError(
            f"expected two manifests or releases (OLD NEW), got {len(paths)}: {got}; "
            "e.g. rbln-build diff old/manifest.json build/manifest.json."
        )
    old, new = load_manifest(Path(paths[0])), load_manifest(Path(paths[1]))
    d = diff_manifests(old, new)
    if fmt == "json":
        print(json.dumps({**d, "rows": cell_rows(d, old, new)}, indent=2, sort_keys=True))
    elif fmt == "markdown":
        print(render_markdown(d, old, new, (paths[0], paths[1])))
    else:
        print(render(d, old, new))
    return 1 if d["counts_changed"] else 0
