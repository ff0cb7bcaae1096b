"""One row per changed cell of a ``diff_manifests`` result, with its deltas, largest change first:
what ``diff`` prints (text, Markdown, JSON) and ``report --compare`` shows.

A row: the cell (its new id), the id it had when an edit renamed it, what changed in words
("options changed: batch_size 8 -> 4", "budget 0.3 -> 0.5", "added"), and [old, new] of its block
count, the bytes per device its full pool and its floor need (the manifest's
``budget_for_full_pool.bytes`` / ``budget_for_floor.bytes``), its budget in bytes per device and
its status. Ordered by the size of the change: the block count's, then the full pool's bytes, then
the budget's; added and removed cells after the changed ones.
"""

from __future__ import annotations

from typing import Any

__all__ = ["quality_columns", "ROW_COLUMNS", "cell_rows", "markdown_rows", "show_bytes", "show_pair", "text_rows"]

ROW_COLUMNS = (
    ("blocks", "blocks"),
    ("full_pool_bytes", "full pool / device"),
    ("floor_bytes", "floor / device"),
    ("budget_bytes", "budget / device"),
    ("status", "status"),
)
_OTHER = {"compile_key": "compile key", "toolchain": "toolchain", "budget_bytes": "", "num_min_blocks": ""}


def _needs(entry: dict[str, Any] | None, key: str) -> Any:
    part = (entry or {}).get(key)
    return part.get("bytes") if isinstance(part, dict) else None


def _values(entry: dict[str, Any] | None) -> dict[str, Any]:
    e = entry or {}
    return {
        "blocks": e.get("kvcache_num_blocks"),
        "full_pool_bytes": _needs(entry, "budget_for_full_pool"),
        "floor_bytes": _needs(entry, "budget_for_floor"),
        "budget_bytes": e.get("budget_bytes"),
        "status": e.get("status"),
    }


def _options_text(a: Any, b: Any) -> str:
    a, b = a if isinstance(a, dict) else {}, b if isinstance(b, dict) else {}
    moved = [f"{k} {a.get(k, '-')} -> {b.get(k, '-')}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return "options changed: " + ", ".join(moved)


def _change(fields: dict[str, list[Any]]) -> str:
    parts = []
    if "options" in fields:
        parts.append(_options_text(*fields["options"]))
    if "memory_budget" in fields:
        parts.append(f"budget {fields['memory_budget'][0]!r} -> {fields['memory_budget'][1]!r}")
    others = [label for name, label in _OTHER.items() if name in fields and label]
    if others:
        parts.append(f"{' and '.join(others)} changed")
    return "; ".join(parts) or "changed"


def _size(pair: list[Any]) -> float:
    a, b = pair
    nums = [v for v in (a, b) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(nums) == 2:
        return abs(nums[1] - nums[0])
    return abs(nums[0]) if nums else 0.0


def cell_rows(d: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of ``d`` (``diff_manifests(old, new)``), largest change first."""
    was = {**d.get("budget_edits", {}), **d.get("option_edits", {})}
    rows = []
    for cid, fields in d["changed"].items():
        a, b = _values(old[was.get(cid, cid)]), _values(new[cid])
        rows.append({"cell": cid, "was": was.get(cid), "change": _change(fields), **{k: [a[k], b[k]] for k in a}})
    for cid, change, a, b in [
        *((c, "added", _values(None), _values(new[c])) for c in d["added"]),
        *((c, "removed", _values(old[c]), _values(None)) for c in d["removed"]),
    ]:
        rows.append({"cell": cid, "was": None, "change": change, **{k: [a[k], b[k]] for k in a}})

    def order(row: dict[str, Any]) -> tuple[Any, ...]:
        sizes = [-_size(row[k]) for k in ("blocks", "full_pool_bytes", "budget_bytes")]
        return (row["change"] in ("added", "removed"), *sizes, row["cell"])

    return sorted(rows, key=order)


def show_bytes(n: Any) -> str:
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return "-"
    sign = "-" if n < 0 else ""
    n = abs(n)
    return f"{sign}{n / 2**30:,.2f} GiB" if n >= 2**30 else f"{sign}{n / 2**20:,.1f} MiB"


def show_pair(key: str, pair: list[Any]) -> str:
    """``32 -> 16 (-16)``; one value when it did not change; bytes in GiB/MiB."""
    a, b = pair
    show = show_bytes if key.endswith("_bytes") else (lambda v: "-" if v is None else str(v))
    if a == b:
        return show(a)
    text = f"{show(a)} -> {show(b)}"
    if key != "status" and all(isinstance(v, int) and not isinstance(v, bool) for v in (a, b)):
        delta = b - a
        text += f" ({'+' if delta > 0 else ''}{show(delta) if key.endswith('_bytes') else delta})"
    return text


def _name(row: dict[str, Any]) -> str:
    return f"{row['was']} -> {row['cell']}" if row["was"] else row["cell"]


def text_rows(rows: list[dict[str, Any]]) -> list[str]:
    """The rows as an aligned table (a header, a rule, one line per cell)."""
    table = [("cell", "change", *(label for _, label in ROW_COLUMNS))]
    table += [(_name(r), r["change"], *(show_pair(k, r[k]) for k, _ in ROW_COLUMNS)) for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def markdown_rows(rows: list[dict[str, Any]]) -> list[str]:
    """The rows as a Markdown table (GitHub's), cell ids as code, pipes escaped."""

    def md(text: str) -> str:
        return " ".join(text.split()).replace("|", "\\|")

    lines = [
        "| cell | change | " + " | ".join(label for _, label in ROW_COLUMNS) + " |",
        "|---|---|" + "---:|" * (len(ROW_COLUMNS) - 1) + "---|",
    ]
    for r in rows:
        name = f"`{md(r['was'])}` → `{md(r['cell'])}`" if r["was"] else f"`{md(r['cell'])}`"
        values = " | ".join(md(show_pair(k, r[k])) for k, _ in ROW_COLUMNS)
        lines.append(f"| {name} | {md(r['change'])} | {values} |")
    return lines


def quality_columns(entry: dict[str, Any]) -> tuple[str, str]:
    """A quantized cell's figures as the table shows them: perplexity change against the float
    weights, greedy agreement (``-``: none; ``n/a``: not measured)."""
    q = entry.get("quality")
    if not isinstance(q, dict):
        return "-", "-"
    if not q.get("measured"):
        return "n/a", "n/a"
    return f"{float(q['perplexity_increase']):+.2%}", f"{float(q['greedy_agreement']):.0%}"
