"""``report --compare OLD``: what changed between an earlier manifest or release and this build, as
a section of the page: counts by status, the budgets, one row per changed cell with its deltas,
largest first (``_rows``; a budget edit or an options change paired with the old cell), resolved
counts and failures; and which of the grid's squares to mark (``grid_marks``)."""

from __future__ import annotations

from html import escape
from typing import Any

from ._changes import diff_manifests
from ._data import BuildView, budget_label, outcome
from ._html import OUTCOME_TEXT, SHORT_TEXT, table
from ._rows import ROW_COLUMNS, cell_rows, show_pair

__all__ = ["compare_section", "grid_marks"]

MAX_ROWS = 40  # rows shown per table; the rest are listed, folded


def _status(e: dict[str, Any]) -> str:
    try:
        return outcome(e)
    except (KeyError, TypeError):
        return str(e.get("status"))


def _ids(ids: list[str]) -> str:
    return ", ".join(f"<code>{escape(c)}</code>" for c in ids) or "none"


def _rows(rows: list[list[str]], header: list[str], what: str) -> str:
    shown = table(header, rows[:MAX_ROWS])
    if len(rows) > MAX_ROWS:
        rest = table(header, rows[MAX_ROWS:])
        shown += f"<details><summary>{len(rows) - MAX_ROWS:,} more {what}</summary>{rest}</details>"
    return shown


def grid_marks(view: BuildView, old: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """{cell id of this build: ("changed", what changed) | ("added", "added")}: the cells the
    section's rows name, paired as ``diff`` pairs them (a removed cell has no square to mark)."""
    new = {e["cell"]: e for e in view.entries}
    rows = cell_rows(diff_manifests(old, new), old, new)
    return {
        r["cell"]: ("added", "added") if r["change"] == "added" else ("changed", r["change"])
        for r in rows
        if r["change"] != "removed"
    }


def compare_section(view: BuildView, old: dict[str, Any]) -> str:
    new = {e["cell"]: e for e in view.entries}
    d = diff_manifests(old, new)
    edits: dict[str, str] = {**d["budget_edits"], **d["option_edits"]}
    before: dict[str, int] = {}
    now: dict[str, int] = {}
    for cells, counts in ((old, before), (new, now)):
        for e in cells.values():
            counts[_status(e)] = counts.get(_status(e), 0) + 1
    names = [k for k in OUTCOME_TEXT if before.get(k) or now.get(k)]
    names += sorted(k for k in set(before) | set(now) if k not in OUTCOME_TEXT)
    count_rows = [
        [
            escape(OUTCOME_TEXT.get(k, k)),
            f'<td class="num">{before.get(k, 0):,}</td>',
            f'<td class="num">{now.get(k, 0):,}</td>',
            f'<td class="num">{now.get(k, 0) - before.get(k, 0):+,}</td>',
        ]
        for k in names
    ]
    count_rows.append(
        ["all cells", f'<td class="num">{len(old):,}</td>', f'<td class="num">{len(new):,}</td>',
         f'<td class="num">{len(new) - len(old):+,}</td>']
    )  # fmt: skip
    budgets_old = {budget_label(e.get("memory_budget")) for e in old.values()}
    budgets_new = {budget_label(e.get("memory_budget")) for e in new.values()}
    gone, came = sorted(budgets_old - budgets_new), sorted(budgets_new - budgets_old)
    budgets = (
        "<p>Budgets: the same."
        if not gone and not came
        else f"<p>Budgets: {escape(', '.join(gone)) or 'none'} no longer built; {escape(', '.join(came)) or 'none'} new."
    )
    budget_edits, option_edits = len(d["budget_edits"]), len(d["option_edits"])
    budgets += (
        f" {budget_edits:,} cell{'' if budget_edits == 1 else 's'} had {'its' if budget_edits == 1 else 'their'} "
        "budget edited (paired with the old cell below)."
        if budget_edits
        else ""
    )
    budgets += (
        f" {option_edits:,} cell{'' if option_edits == 1 else 's'} had {'its' if option_edits == 1 else 'their'} "
        "build options changed (paired with the old cell below)."
        if option_edits
        else ""
    ) + "</p>"

    def arrows(text: str) -> str:
        return escape(text).replace(" -&gt; ", " &rarr; ")

    def short(e: dict[str, Any]) -> str:
        return escape(SHORT_TEXT.get(_status(e), _status(e)))

    changes = []
    for r in cell_rows(d, old, new):
        if r["change"] in ("added", "removed"):
            continue
        a, b = old[r["was"] or r["cell"]], new[r["cell"]]
        changes.append(
            [
                f"<code>{escape(r['was'])}</code> &rarr; <code>{escape(r['cell'])}</code>"
                if r["was"]
                else f"<code>{escape(r['cell'])}</code>",
                arrows(r["change"]),
                *(f'<td class="num">{arrows(show_pair(k, r[k]))}</td>' for k, _ in ROW_COLUMNS[:-1]),
                short(b) if short(a) == short(b) else f"{short(a)} &rarr; {short(b)}",
            ]
        )
    failing = ("failed", "unexpected_success")
    back = {was: cid for cid, was in edits.items()}
    newly = sorted(
        cid
        for cid, e in new.items()
        if _status(e) in failing
        and (edits.get(cid, cid) not in old or _status(old[edits.get(cid, cid)]) not in failing)
    )
    fixed = sorted(
        cid
        for cid, e in old.items()
        if _status(e) in failing and back.get(cid, cid) in new and _status(new[back.get(cid, cid)]) not in failing
    )
    verdict = (
        "Resolved block counts changed: review before release."
        if d["counts_changed"]
        else "No resolved block count changed."
    )
    return (
        f"<p>{len(d['added']):,} cells added, {len(d['removed']):,} removed, {len(d['changed']):,} changed. "
        f"<strong>{verdict}</strong></p>"
        + table(["status", "before", "now", "change"], count_rows)
        + budgets
        + (
            _rows(changes, ["cell", "change", *(label for _, label in ROW_COLUMNS)], "changed cells")
            if changes
            else "<p>No cell changed.</p>"
        )
        + f"<p>Failing now, not before: {_ids(newly)}.<br>Failing before, not now: {_ids(fixed)}.</p>"
        + f"<details><summary>cells added ({len(d['added']):,}) and removed ({len(d['removed']):,})</summary>"
        f"<p>added: {_ids(d['added'])}</p><p>removed: {_ids(d['removed'])}</p></details>"
    )
