"""The page's matrix at a glance: per device target, a grid of its cells (rows: model and the options
that vary; columns: budgets by bytes per device), each square a link to its compile's figures; a
budget axis longer than ``MAX_GRID_COLUMNS`` is drawn as a picture (the table follows, folded).
With ``report --compare``, the squares of the cells that changed (paired with their old selves as
``diff`` pairs them: by model, device and budget across option changes, across budget edits) are
marked ``Δ`` and outlined, the added ones ``+`` and outlined dashed (``marks``, from ``_compare``)."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from ..figures import OUTCOME_GLYPHS, FigureCache
from ._data import BuildView, budget_label, outcome
from ._html import OUTCOME_TEXT, png, size, table

__all__ = ["MARK_GLYPHS", "MAX_GRID_COLUMNS", "device_anchor", "grid_section", "marks_legend"]

MAX_GRID_COLUMNS = 24
MARK_GLYPHS = {"changed": "\u0394", "added": "+"}  # Δ changed since the compared manifest, + added


def device_anchor(device: str, npu: str) -> str:
    return f"grid.{device}.{npu}"


def _column_order(cells: list[dict[str, Any]]) -> tuple[list[tuple[str, str]], dict[tuple[str, str], int | None]]:
    """The budget columns by bytes per device. A column's bytes are those of any of its cells that
    resolved them (a cell that failed before, e.g. a budget above the device, has none): the order
    never depends on which cell came last. Columns no cell resolved go last, in label order."""
    known: dict[tuple[str, str], int | None] = {}
    for e in cells:
        col = (type(e["memory_budget"]).__name__, budget_label(e["memory_budget"]))
        if known.get(col) is None:
            known[col] = e["budget_bytes"]
    order = sorted(known, key=lambda c: (known[c] is None, known[c] or 0, c[1]))
    return order, known


def marks_legend(marks: dict[str, tuple[str, str]]) -> str:
    """The line under the grid heading that says what the marks mean and how many there are."""
    counts = {kind: sum(1 for k, _ in marks.values() if k == kind) for kind in MARK_GLYPHS}
    return (
        f"<p>Since the compared manifest: <strong>{MARK_GLYPHS['changed']}</strong> (outlined) changed, "
        f"{counts['changed']:,} cell{'' if counts['changed'] == 1 else 's'}; <strong>{MARK_GLYPHS['added']}"
        f"</strong> (outlined, dashed) added, {counts['added']:,}. Hover a square for what changed.</p>"
    )


def _square(e: dict[str, Any], slugs: dict[tuple[str, str], str], mark: tuple[str, str] | None = None) -> str:
    o, blocks = outcome(e), e["kvcache_num_blocks"]
    if blocks is not None and o in ("full_pool", "cut", "unexpected_success"):
        text = f"{blocks}" if blocks == e["num_full_blocks"] else f"{blocks} / {e['num_full_blocks']}"
    else:
        text = ""
    text = f"{OUTCOME_GLYPHS[o]} {text}".strip()
    tip = f"{e['cell']}: {OUTCOME_TEXT[o]}" + (f" ({e['error_kind']})" if e.get("error_kind") else "")
    cls = o
    if mark is not None:
        text = f"{MARK_GLYPHS[mark[0]]} {text}"
        tip += f"; {mark[1]}" if mark[0] == "changed" else "; added since the compared manifest"
        cls += f" {mark[0]}"
    slug = slugs.get((str(e.get("compile_key")), e["inputs"]["npu"]))
    if slug is not None:
        text = f'<a href="#{escape(slug)}">{text}</a>'
    return f'<td class="{cls}" title="{escape(tip)}">{text}</td>'


def _draw_grid(*args: Any) -> bytes:
    from ..figures import grid_figure, render

    return render(grid_figure(*args))


def grid_section(
    view: BuildView, figures: FigureCache | None = None, marks: dict[str, tuple[str, str]] | None = None
) -> str:
    """The grids; ``marks``: {cell id: ("changed", what changed) | ("added", "added")} to mark."""
    figures = figures or FigureCache(None)
    marks = marks or {}
    out = []
    slugs = {(g.compile_key, g.npu): g.slug for g in view.groups}
    devices = sorted({(e["inputs"]["device"], e["inputs"]["npu"], e["inputs"]["num_devices"]) for e in view.entries})
    for device, npu, n in devices:
        cells = [e for e in view.entries if (e["inputs"]["device"], e["inputs"]["npu"]) == (device, npu)]
        rows: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {}
        for e in cells:
            col = (type(e["memory_budget"]).__name__, budget_label(e["memory_budget"]))
            rows.setdefault((e["inputs"]["model"], view.options(e)), {})[col] = e
        order, known = _column_order(cells)
        header = ["model / options"] + [
            escape(c[1] if c[0] != "str" or not c[1].isdigit() else json.dumps(c[1]))
            + (f"<br><span class=muted>{size(known[c])}</span>" if known[c] is not None else "")
            for c in order
        ]
        body, labels = [], []
        for (model, opts), by_col in sorted(rows.items()):
            labels.append(f"{model} {opts}".strip())
            row = [escape(model) + (f" <span class=muted>{escape(opts)}</span>" if opts else "")]
            row += [
                _square(by_col[c], slugs, marks.get(by_col[c]["cell"])) if c in by_col else '<td class="none"></td>'
                for c in order
            ]
            body.append(row)
        title = f'<h3 id="{escape(device_anchor(device, npu))}">{escape(device)}: {n} x {escape(npu)}</h3>'
        grid = f'<div class="wide">{table(header, body, "grid")}</div>'  # scrolls sideways, not off the page
        if len(order) > MAX_GRID_COLUMNS:
            args: tuple[Any, ...] = (
                labels,
                [c[1] for c in order],
                [
                    [None if c not in by_col else outcome(by_col[c]) for c in order]
                    for _, by_col in sorted(rows.items())
                ],
                f"{device}: {n} x {npu}, {len(cells):,} cells over {len(order):,} budgets",
            )
            if marks:  # only then: an unmarked picture keeps its arguments, so its cached figure
                args += (
                    [
                        [
                            marks[by_col[c]["cell"]][0] if c in by_col and by_col[c]["cell"] in marks else None
                            for c in order
                        ]
                        for _, by_col in sorted(rows.items())
                    ],
                )
            picture = figures.get({"grid": args}, lambda args=args: _draw_grid(*args))  # type: ignore[misc]
            grid = (
                png(picture, f"grid of {device}")
                + f"<details><summary>the grid as a table ({len(order)} columns)</summary>{grid}</details>"
            )
        out.append(title + grid)
    return "".join(out)
