"""``build/report/index.html``: one self-contained page (figures embedded as PNG, no script, no network).

Sections: the matrix at a glance (a grid per device target), the failures with the budget that would
fix each, one pair of figures per compile group (blocks vs budget, where the DRAM goes), every cell,
and the compile keys with their inputs. Everything is sorted and nothing depends on the time, the
machine or where the build directory is, so one manifest gives one page, byte for byte.
"""

from __future__ import annotations

import json
import math
from html import escape
from importlib import metadata
from typing import Any

from ..errors import EstimateError
from ..figures import GRID_COLORS, OUTCOME_GLYPHS, FigureCache
from ._compare import compare_section, grid_marks
from ._data import FAILED_STATUSES, BuildView, budget_label, outcome
from ._deployments import deployments_section
from ._grid import MAX_GRID_COLUMNS, device_anchor, grid_section, marks_legend
from ._html import OUTCOME_TEXT, SHORT_TEXT, num, png, table
from ._rows import quality_columns

_grid = grid_section  # the name tests and older callers use

__all__ = ["render_page", "MAX_GRID_COLUMNS"]

CSS = """
body{font:14px/1.45 "DejaVu Sans",Verdana,sans-serif;margin:24px auto;max-width:1280px;color:#1d1d1d;padding:0 16px}
h1{font-size:24px;margin:0 0 4px} h2{font-size:19px;margin:30px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:22px 0 4px} .muted{color:#666} code{font-size:12px}
table{border-collapse:collapse;margin:6px 0 14px} th,td{border:1px solid #d0d0d0;padding:3px 7px;text-align:left}
th{background:#f3f3f3;font-weight:600} td.num{text-align:right;font-variant-numeric:tabular-nums}
table.grid td{text-align:center;min-width:64px;font-weight:600} table.grid td.none{background:#fafafa}
table.grid a{color:inherit;text-decoration:none} table.grid a:hover{text-decoration:underline}
table.grid td.changed{outline:3px solid #1d1d1d;outline-offset:-3px} table.grid td.added{outline:2px dashed #1d1d1d;outline-offset:-3px}
%(status_css)s
nav ol{margin:4px 0 10px;padding-left:22px} nav li{margin:1px 0} .wide{overflow-x:auto;max-width:100%}
.swatch{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:-1px;border:1px solid #999}
img{max-width:100%;display:block;margin:4px 0} .note{background:#fff8e1;padding:6px 10px;border-left:4px solid #e69f00}
td.msg{max-width:640px;font-size:12px} table.cells{font-size:12px} table.cells td{white-space:nowrap}
"""


def _version() -> str:
    try:
        return metadata.version("rbln-build")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def _ceil4(fraction: float) -> str:
    """Rounded up: any budget at or above it still suffices."""
    return f"{min(1.0, math.ceil(fraction * 10_000) / 10_000):.4f}"


def _fix(entry: dict[str, Any]) -> str:
    """The budget that would fix a failed cell, from its breakdown."""
    if entry["status"] == "unexpected_success":
        return "it builds: remove it from matrix.expect_failure"
    floor = entry.get("budget_for_floor")
    if not floor:
        return "-"
    if floor.get("bytes") is None:
        return escape(floor.get("reason") or "no budget fits")
    return (
        f"memory_budget &ge; {_ceil4(floor['fraction'])} ({num(floor['bytes'])} B per device) "
        f"for the floor of {floor['blocks']} blocks"
    )


# -- sections -----------------------------------------------------------------------------------------


def _summary(view: BuildView) -> str:
    counts: dict[str, int] = {}
    for e in view.entries:
        counts[outcome(e)] = counts.get(outcome(e), 0) + 1
    parts = ", ".join(f"{counts[k]} {OUTCOME_TEXT[k]}" for k in OUTCOME_TEXT if counts.get(k))
    backends = sorted({g.backend for g in view.groups})
    # the manifest records each cell's toolchain in its inputs; older compile entries may carry it too
    recorded = [(e.get("inputs") or {}).get("toolchain") for e in view.entries]
    recorded += [m.get("toolchain") for m in view.compile_meta.values()]
    toolchains = sorted({json.dumps(t, sort_keys=True) for t in recorded if isinstance(t, dict)})
    tool = (
        "; ".join(escape(t) for t in toolchains)
        if toolchains
        else "not recorded in this build's manifest (the compile keys below hash the toolchain versions)"
    )
    legend = "".join(f'<span class="swatch {k}"></span>{OUTCOME_GLYPHS[k]} {OUTCOME_TEXT[k]}' for k in OUTCOME_TEXT)
    return (
        f"<p>{len(view.entries)} cells: {parts or 'none'}.<br>"
        f"manifest.json sha256 <code>{view.manifest_sha256}</code><br>"
        f"rbln-build {escape(_version())}; backends: {escape(', '.join(backends) or '-')}; toolchain: {tool}</p>"
        f"<p class=muted>Legend:{legend}</p>"
    )


def _failures(view: BuildView) -> str:
    """Counts by kind, then one row per compile and kind (its cells share the message's shape and
    the budget that fixes them), then every id, folded."""
    bad = [e for e in view.entries if e["status"] in (*FAILED_STATUSES, "expected_failure")]
    if not bad:
        return "<p>No cell failed.</p>"
    groups: dict[tuple[str, str, str, str, str], list[dict[str, Any]]] = {}
    for e in bad:
        key = (
            e["status"],
            e["inputs"]["model"],
            e["inputs"]["device"],
            str(e.get("compile_key")),
            e.get("error_kind") or "-",
        )
        groups.setdefault(key, []).append(e)
    kinds: dict[tuple[str, str], int] = {}
    for (status, *_, kind), members in groups.items():
        kinds[(status, kind)] = kinds.get((status, kind), 0) + len(members)
    summary = ", ".join(f"{n:,} {OUTCOME_TEXT[s]} ({escape(k)})" for (s, k), n in sorted(kinds.items()))
    rows = []
    for (status, *_, kind), members in sorted(groups.items()):
        members.sort(key=lambda e: (e["budget_bytes"] is None, e["budget_bytes"] or 0, e["cell"]))
        first, last = members[0], members[-1]
        which = f"<code>{escape(first['cell'])}</code>"
        if len(members) > 1:
            which += (
                f"<br>and {len(members) - 1:,} more, budgets {escape(budget_label(first['memory_budget']))}"
                f" .. {escape(budget_label(last['memory_budget']))}"
            )
        rows.append(
            [
                which,
                SHORT_TEXT[status],
                escape(kind),
                f'<td class="msg">{escape(first.get("error") or "-")}</td>',
                _fix(first),
            ]
        )
    ids = ", ".join(f"<code>{escape(e['cell'])}</code>" for e in bad)
    return (
        f"<p>{len(bad):,} cell{'' if len(bad) == 1 else 's'}: {summary}.</p>"
        + table(["cells", "status", "kind", "message (the first cell's)", "budget that would fix it"], rows)
        + f"<details><summary>every failed cell ({len(bad):,})</summary><p>{ids}</p></details>"
    )


def _members(cells: list[dict[str, Any]]) -> str:
    if len(cells) <= 8:
        return "cells: " + ", ".join(f"<code>{escape(e['cell'])}</code>" for e in cells)
    first, last = budget_label(cells[0]["memory_budget"]), budget_label(cells[-1]["memory_budget"])
    return f"{len(cells):,} cells, budgets {escape(first)} .. {escape(last)} (listed under Cells)"


def _group_pngs(group: Any, figures: FigureCache) -> tuple[bytes, bytes]:
    """The group's (curve, DRAM) figures, each drawn once for what determines it (its report, its
    title and target, its cells' manifest entries)."""
    assert group.report is not None
    what = {
        "group": [group.title, group.model, group.device, group.npu, group.num_devices, group.attention],
        "report": group.report.to_json(),
        "cells": group.cells,
    }
    drawn: dict[str, tuple[bytes, bytes]] = {}

    def draw(which: int) -> bytes:
        if "pair" not in drawn:
            from ._compose import group_figures

            drawn["pair"] = group_figures(group)
        return drawn["pair"][which]

    return figures.get({"curve": what}, lambda: draw(0)), figures.get({"dram": what}, lambda: draw(1))


def _groups(view: BuildView, figures: FigureCache | None = None) -> str:
    figures = figures or FigureCache(None)
    out = []
    for g in view.groups:
        a = g.attention
        out.append(
            f'<h3 id="{escape(g.slug)}">{escape(g.title)}</h3>'
            f"<p class=muted>{escape(str(a.get('attn_impl')))}, batch_size {a.get('batch_size')}, max_seq_len "
            f"{a.get('max_seq_len')}, block {a.get('kvcache_block_size')}; compile <code>{g.compile_key[:12]}</code>"
            f" ({escape(g.backend)}, {escape(g.produced or '-')}); " + _members(g.cells) + "</p>"
        )
        problem = g.problem
        if problem is None:
            try:
                curve_png, dram_png = _group_pngs(g, figures)
            except EstimateError as exc:
                problem = f"the compile entry's report does not fit these cells: {exc}"
            else:
                out.append(png(curve_png, f"blocks vs budget, {g.slug}") + png(dram_png, f"DRAM per chiplet, {g.slug}"))
        if problem is not None:
            out.append(f'<p class="note">No figures: {escape(problem)}</p>')
    return "".join(out)


def _cells(view: BuildView) -> str:
    quality = any("quality" in e for e in view.entries)  # quantized variants: their figures beside the blocks
    rows = []
    for e in view.entries:
        floor, full = e.get("budget_for_floor") or {}, e.get("budget_for_full_pool") or {}
        art = (e.get("artifact") or {}).get("content_hash") or "-"
        rows.append(
            [
                f"<code>{escape(e['cell'])}</code>",
                f'<td class="{outcome(e)}">{SHORT_TEXT[outcome(e)]}</td>',
                escape(budget_label(e["memory_budget"])),
                f'<td class="num">{num(e["budget_bytes"])}</td>',
                *(
                    f'<td class="num">{num(e[k])}</td>'
                    for k in ("kvcache_num_blocks", "num_full_blocks", "num_min_blocks")
                ),
                *(f'<td class="num">{escape(c)}</td>' for c in (quality_columns(e) if quality else ())),
                f'<td class="num">{num(floor.get("bytes"))}</td>',
                f'<td class="num">{num(full.get("bytes"))}</td>',
                escape(e.get("produced") or "-"),
                f"<code>{escape(str(e.get('compile_key'))[:12])}</code>",
                f"<code>{escape(e['cell_key'][:12])}</code>",
                f"<code>{escape(art[:19])}</code>",
            ]
        )
    return table(
        [
            "cell",
            "status",
            "budget",
            "budget bytes",
            "blocks",
            "full",
            "floor",
            *(("ppl vs float", "greedy agree") if quality else ()),
            "floor needs (B)",
            "full pool needs (B)",
            "produced",
            "compile",
            "cell key",
            "artifact",
        ],
        rows,
        "cells",
    )


def _inputs(view: BuildView) -> str:
    seen: dict[str, dict[str, Any]] = {}
    for e in view.entries:
        if e.get("compile_key") and e["compile_key"] not in seen:
            seen[e["compile_key"]] = e["inputs"]
    rows = []
    for key in sorted(seen):
        i = seen[key]
        rows.append(
            [
                f"<code>{key}</code>",
                escape(i["recipe"]),
                f"<code>{escape(i['recipe_hash'][:16])}</code>",
                f"{i['num_devices']} x {escape(i['npu'])}",
                escape(i["backend"]),
                f"<code>{escape(json.dumps(i['attention'], sort_keys=True))}</code>",
            ]
        )
    return table(["compile key", "recipe", "recipe hash", "devices", "backend", "attention"], rows)


def _contents(view: BuildView, compare: bool) -> str:
    """The table of contents: every section, each device's grid and each compile's figures."""
    devices = sorted({(e["inputs"]["device"], e["inputs"]["npu"], e["inputs"]["num_devices"]) for e in view.entries})
    grids = "".join(
        f'<li><a href="#{escape(device_anchor(d, npu))}">{escape(d)}: {n} x {escape(npu)}</a></li>'
        for d, npu, n in devices
    )
    groups = "".join(f'<li><a href="#{escape(g.slug)}">{escape(g.title)}</a></li>' for g in view.groups)
    return (
        "<nav><strong>Contents</strong><ol>"
        f'<li><a href="#glance">The matrix at a glance</a><ol>{grids}</ol></li>'
        + ('<li><a href="#changes">What changed</a></li>' if compare else "")
        + '<li><a href="#failures">Failures</a></li>'
        + ('<li><a href="#deployments">Deployments</a></li>' if view.deployments else "")
        + f'<li><a href="#figures">Blocks vs budget, and where the DRAM goes</a><ol>{groups}</ol></li>'
        '<li><a href="#cells">Cells</a></li><li><a href="#inputs">Compile keys and inputs</a></li></ol></nav>'
    )


def render_page(view: BuildView, old: dict[str, Any] | None = None, figures: FigureCache | None = None) -> bytes:
    """The page; with ``old`` (an earlier manifest's cells), a section of what changed since;
    ``figures`` keeps each figure once drawn (None: draw every figure)."""
    figures = figures or FigureCache(None)
    marks = None if old is None else grid_marks(view, old)
    body = (
        "<h1>rbln-build report</h1>"
        + _summary(view)
        + _contents(view, old is not None)
        + '<h2 id="glance">The matrix at a glance</h2><p class=muted>Each square shows its status glyph and its '
        "kvcache_num_blocks (cut cells: blocks / full pool) and links to its compile's figures; hover for the "
        "cell id.</p>"
        + (marks_legend(marks) if marks is not None else "")
        + grid_section(view, figures, marks)
        + (
            ""
            if old is None
            else '<h2 id="changes">What changed since the compared manifest</h2>' + compare_section(view, old)
        )
        + '<h2 id="failures">Failures</h2>'
        + _failures(view)
        + (
            '<h2 id="deployments">Deployments</h2><p class=muted>What each model occupies at its built count '
            "(from the built reports), per chiplet, beside the reservations, the margin and the headroom.</p>"
            + deployments_section(view.deployments)
            if view.deployments
            else ""
        )
        + '<h2 id="figures">Blocks vs budget, and where the DRAM goes</h2><p class=muted>Budgets are bytes per '
        "device. The curve is exact: each step is the smallest budget at which one more block fits "
        "(rbln_build.estimator). Bars show each chiplet at the cell's resolved count (a failed cell: at the floor, "
        "hatched).</p>"
        + _groups(view, figures)
        + '<h2 id="cells">Cells</h2>'
        + _cells(view)
        + '<h2 id="inputs">Compile keys and inputs</h2>'
        + _inputs(view)
    )
    css = CSS.replace("%(status_css)s", " ".join(f".{k}{{background:{v}}}" for k, v in GRID_COLORS.items()))
    page = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>rbln-build report</title>'
        f"<style>{css}</style></head><body>\n{body}\n</body></html>\n"
    )
    return page.encode("utf-8")
