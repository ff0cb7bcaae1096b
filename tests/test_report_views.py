"""The report's views on synthetic manifests (no build): the grid picture reads for color-blind eyes
(checked in its pixels under a deuteranopia and a protanopia simulation, and by glyph), columns keep
budget order, option sweeps get short labels, ordered sections and links, the DRAM figure keeps the
cells that matter, and ``--compare`` says what changed."""

from __future__ import annotations

import io
import itertools
import math
import re
from typing import Any

import pytest

from rbln_build.reporting._data import BuildView, Group, _varying

PIL = pytest.importorskip(
    "PIL.Image",
    reason="Pillow is not installed: it comes with matplotlib, the report extra (pip install 'rbln-build[report]')",
)
pytest.importorskip(
    "matplotlib", reason="matplotlib is not installed: figures need the report extra (pip install 'rbln-build[report]')"
)

from rbln_build.figures._bars import grid_figure  # noqa: E402
from rbln_build.figures._figures import OUTCOME_COLORS, render  # noqa: E402
from rbln_build.reporting._compose import dram_cells  # noqa: E402
from rbln_build.reporting._grid import grid_section  # noqa: E402
from rbln_build.reporting._page import render_page  # noqa: E402

STATUSES = ["full_pool", "cut", "failed", "unexpected_success", "expected_failure"]

# Machado, Oliveira & Fernandes (2009), severity 1.0, on linear RGB
DEUTERANOPIA = ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.011820, 0.042940, 0.968881))
PROTANOPIA = ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998))


def _linear(c: float) -> float:
    c /= 255
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _lab(rgb: tuple[float, float, float]) -> tuple[float, float, float]:
    r, g, b = rgb  # linear
    x, y, z = (
        (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.9505,
        0.2126 * r + 0.7152 * g + 0.0722 * b,
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.089,
    )

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def seen_as(pixel: tuple[int, int, int], matrix: Any) -> tuple[float, float, float]:
    """The CIELAB color a viewer with the simulated deficiency sees for an sRGB pixel."""
    lin = [_linear(c) for c in pixel]
    sim = tuple(min(1.0, max(0.0, sum(m * v for m, v in zip(row, lin, strict=True)))) for row in matrix)
    return _lab(sim)  # type: ignore[arg-type]


def worst_pair(colors: dict[str, tuple[int, int, int]], matrix: Any) -> tuple[float, str, str]:
    return min(
        (math.dist(seen_as(colors[a], matrix), seen_as(colors[b], matrix)), a, b)
        for a, b in itertools.combinations(colors, 2)
    )


def hex_rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def test_the_grid_picture_tells_every_status_apart_under_deuteranopia_and_by_glyph() -> None:
    columns = [f"0.{i:02d}" for i in range(1, 31)]
    outcomes = [[s] * len(columns) for s in STATUSES]  # one row per status
    fig = grid_figure(STATUSES, columns, outcomes, "every status")
    img = PIL.open(io.BytesIO(render(fig))).convert("RGB")
    ax = fig.axes[0]
    height = img.size[1]

    def pixel(col: float, row: float) -> tuple[int, int]:
        x, y = ax.transData.transform((col, row))
        return round(x), round(height - y)

    squares: dict[str, tuple[int, int, int]] = {}
    for row, status in enumerate(STATUSES):
        x, y = pixel(4.3, row + 0.3)  # a corner of a square: its fill, away from the glyph
        squares[status] = img.getpixel((x, y))
        assert squares[status] == hex_rgb(OUTCOME_COLORS[status]), status
        cx, cy = pixel(4, row)  # around the center: the glyph, in another ink than the fill
        box = [img.getpixel((cx + dx, cy + dy)) for dx in range(-4, 5) for dy in range(-4, 5)]
        ink = [p for p in box if math.dist(p, squares[status]) > 60]
        assert len(ink) >= 3, f"no glyph on the {status} square"
    for matrix, name in ((DEUTERANOPIA, "deuteranopia"), (PROTANOPIA, "protanopia")):
        distance, a, b = worst_pair(squares, matrix)
        assert distance > 20, f"under {name}, {a} and {b} are only {distance:.1f} apart (CIE76)"
    # the old light palette failed this check (full pool and failed looked the same): the test can tell
    old = {"full_pool": hex_rgb("#c8e6c9"), "failed": hex_rgb("#ffcdd2"), "unexpected_success": hex_rgb("#f8bbd0")}
    assert worst_pair(old, DEUTERANOPIA)[0] < 10


def entry(
    model: str, budget: Any, nbytes: int | None, status: str, blocks: int | None, **options: Any
) -> dict[str, Any]:
    return {
        "cell": f"{model}.d.b{budget}" + "".join(f".{k}{v}" for k, v in sorted(options.items())),
        "memory_budget": budget,
        "budget_bytes": nbytes,
        "compile_key": (model + "".join(map(str, options.values()))).ljust(64, "0"),
        "cell_key": "c" * 64,
        "inputs": {
            "model": model,
            "recipe": model,
            "recipe_hash": "r" * 64,
            "backend": "torch",
            "attention": {},
            "device": "d",
            "npu": "RBLN-CR03",
            "num_devices": 1,
            "build_options": {"attn_impl": "flash_attn", **options},
            "kvcache_num_blocks": 0,
        },
        "status": status,
        "kvcache_num_blocks": blocks,
        "num_full_blocks": 40,
        "num_min_blocks": 9,
        "error_kind": None if status in ("ok", "unexpected_success") else "insufficient_memory",
        "error": None,
        "warnings": [],
    }


def view_of(entries: list[dict[str, Any]]) -> BuildView:
    view = BuildView("0" * 64, sorted(entries, key=lambda e: e["cell"]), [], {}, _varying(entries))
    groups: dict[str, Group] = {}
    for e in view.entries:
        g = groups.setdefault(
            e["compile_key"],
            Group(e["compile_key"], "RBLN-CR03", 1, e["inputs"]["model"], "d", {}, "torch", problem="synthetic"),
        )
        g.cells.append(e)
        g.options = view.options(e, blocks=False)
    view.groups = sorted(groups.values(), key=lambda g: (g.model, g.device, g.npu, g.options, g.compile_key))
    return view


def test_columns_keep_budget_order_when_a_columns_last_cell_failed_before_its_bytes() -> None:
    entries = [
        entry("a", 0.5, 50 << 20, "ok", 40),
        entry("a", 0.2, 20 << 20, "ok", 12),
        entry("b", 0.2, 20 << 20, "failed", None),
        entry("z", 0.2, None, "failed", None),  # the column's last cell, failed before its bytes were known
        entry("a", 0.3, 30 << 20, "unexpected_success", 21),
    ]
    grid = grid_section(view_of(entries))
    header = re.findall(r"<th>([^<]+)(?:<br><span class=muted>([^<]+)</span>)?</th>", grid)
    assert header[1:] == [("0.2", "20.00 MiB"), ("0.3", "30.00 MiB"), ("0.5", "50.00 MiB")]  # MiB under 1 GiB
    square = re.search(r'<td class="unexpected_success" title="a\.d\.b0\.3: unexpected success">(.*?)</td>', grid)
    assert square is not None and square.group(1).endswith("! 21 / 40</a>")  # it built: its count, not ✗


def test_an_option_sweep_has_short_labels_ordered_sections_and_links_from_the_grid() -> None:
    entries = [entry("m", b, n, "ok", 40, batch_size=bs) for b, n in ((0.3, 3 << 30), (0.5, 5 << 30)) for bs in (8, 1)]
    view = view_of(entries)
    grid = grid_section(view)
    labels = re.findall(r"<tr><td>m <span class=muted>([^<]*)</span></td>", grid)
    assert labels == ["batch_size=1", "batch_size=8"]  # only the option that varies, not raw JSON
    assert "attn_impl" not in grid and "{" not in grid
    assert [g.title for g in view.groups] == [
        "m on d: 1 x RBLN-CR03 (batch_size=1)",
        "m on d: 1 x RBLN-CR03 (batch_size=8)",
    ]
    page = render_page(view).decode()
    for g in view.groups:  # every square links to its compile's section, listed in the contents
        assert grid.count(f'<a href="#{g.slug}">') == 2
        assert f'<li><a href="#{g.slug}">{g.title}</a></li>' in page and f'<h3 id="{g.slug}">' in page
    assert page.index("(batch_size=1)</h3>") < page.index("(batch_size=8)</h3>")


def test_the_dram_figure_keeps_the_floor_the_full_pool_and_every_cut_cell() -> None:
    cells = [entry("m", round(i / 60, 4), i << 30, "failed", None) for i in range(1, 40)]
    cells += [entry("m", 0.67, 40 << 30, "ok", 20)]  # the only cut cell
    cells += [entry("m", round(i / 60, 4), i << 30, "ok", 40) for i in range(41, 61)]
    chosen = dram_cells(cells, 8)
    assert len(chosen) == 8 and chosen == sorted(chosen, key=lambda e: e["budget_bytes"])
    assert cells[38] in chosen and cells[39] in chosen and cells[40] in chosen  # last below the floor, cut, first full


def test_report_compare_pairs_budget_edits_and_counts_what_changed() -> None:
    old = {
        e["cell"]: e
        for e in [entry("a", 0.2, 20, "failed", None), entry("a", 0.5, 50, "ok", 40), entry("b", 0.5, 50, "ok", 40)]
    }
    new = [entry("a", 0.2, 20, "ok", 12), entry("a", 0.6, 60, "ok", 40), entry("c", 0.5, 50, "ok", 40)]
    page = render_page(view_of(new), old).decode()
    section = page[page.index('<h2 id="changes">') : page.index('<h2 id="failures">')]
    assert "1 cells added, 1 removed, 2 changed." in section and "review before release" in section
    assert "<code>a.d.b0.5</code> &rarr; <code>a.d.b0.6</code>" in section  # the budget edit, paired
    assert "0.5 &rarr; 0.6" in section and "- &rarr; 12" in section and "failed &rarr; cut" in section
    assert re.search(
        r"<td>failed</td><td class=\"num\">1</td><td class=\"num\">0</td><td class=\"num\">-1</td>", section
    )
    assert "Failing before, not now: <code>a.d.b0.2</code>" in section
    assert "added: <code>c.d.b0.5</code>" in section and "removed: <code>b.d.b0.5</code>" in section
    assert '<li><a href="#changes">What changed</a></li>' in page


def test_dram_labels_never_overprint_even_with_budgets_above_the_scale() -> None:
    from rbln_build.figures._bars import DramCase, dram_figure
    from rbln_build.figures._curve import ChipletStack

    stack = ChipletStack(
        0, 0, {"weights": 200 << 20, "workspace": 10 << 20, "runtime_buffers": 0, "other": 0, "kv": 30 << 20}
    )
    cases = [DramCase(f"0.{i}\n{i} blocks", (i + 1) << 32, (stack,), False) for i in range(1, 9)]  # all far above
    fig = dram_figure(cases, 1, 16 << 30, "eight budgets, one chiplet each")
    render(fig)  # draws: the texts have their places
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    boxes = [t.get_window_extent(renderer) for t in fig.axes[0].texts]
    assert len(boxes) == 8 and all("↑" in t.get_text() for t in fig.axes[0].texts)  # the budget is in its label
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)


def test_explain_plot_keeps_the_requested_budgets_on_the_picture() -> None:
    from rbln_build.estimator import AllocationReport
    from rbln_build.figures._bars import DramCase
    from rbln_build.figures._figures import Point, zoom_limit
    from rbln_build.reporting import blocks_curve, dram_stacks
    from rbln_build.reporting._compose import explain_figure

    report = AllocationReport.from_json(
        {
            "alloc": {"prefill": {"weights": [[200 << 20]]}},
            "kv_tensors": {"k": {"can_resize": True, "sizes": [[4 << 20]]}},
        }
    )
    attention = {"attn_impl": "flash_attn", "batch_size": 1, "kvcache_block_size": 4096,
                 "kvcache_partition_len": 4096, "max_seq_len": 8192, "prefill_chunk_size": 128}  # fmt: skip
    curve = blocks_curve(report, "RBLN-CR03", 1, attention)
    assert zoom_limit(curve) is not None  # a tiny model: the steps sit in a sliver of the device
    for budget in (1 << 30, 20 << 30, 100 << 30):  # inside, beyond the zoom, far beyond
        stacks = tuple(dram_stacks(report, curve.num_full_blocks))
        case = DramCase("b", budget, stacks)
        fig = explain_figure(curve, [Point("b", budget, curve.num_full_blocks, "full_pool")], [case], "t")
        assert fig.axes[0].get_xlim()[1] >= budget


@pytest.mark.parametrize("many", [5, 12])
def test_explain_plot_dram_labels_never_overprint(many: int) -> None:
    """explain --plot's DRAM panel (half of a fixed-size picture): a tiny model on a 4-chiplet device at
    explain's five default budgets (or twelve), all far above its bars, so each label carries its
    budget; neither they nor the chiplets' names under the bars touch one another."""
    from rbln_build.estimator import AllocationReport
    from rbln_build.figures._bars import DramCase
    from rbln_build.figures._figures import Point
    from rbln_build.reporting import blocks_curve, dram_stacks
    from rbln_build.reporting._compose import explain_figure

    report = AllocationReport.from_json(
        {
            "alloc": {"prefill": {"weights": [[200 << 20, 200 << 20, 0, 40 << 20]]}},
            "kv_tensors": {"k": {"can_resize": True, "sizes": [[4 << 20, 4 << 20, 0, 0]]}},
        }
    )
    attention = {"attn_impl": "flash_attn", "batch_size": 1, "kvcache_block_size": 4096,
                 "kvcache_partition_len": 4096, "max_seq_len": 8192, "prefill_chunk_size": 128}  # fmt: skip
    curve = blocks_curve(report, "RBLN-CR03", 1, attention)
    stacks = tuple(dram_stacks(report, curve.num_full_blocks))
    fractions = (0.1, 0.2, 0.3, 0.5, 1.0) if many == 5 else (*(i / 100 for i in range(1, 8)), 0.1, 0.3, 0.5, 0.8, 1)
    budgets = [(f"{f:.2f}", int(f * curve.available_bytes)) for f in fractions]
    cases = [DramCase(f"{name}\n{curve.num_full_blocks} blocks", b, stacks) for name, b in budgets]
    points = [Point(name, b, curve.num_full_blocks, "full_pool") for name, b in budgets]
    fig = explain_figure(curve, points, cases, "tiny model, five budgets")
    render(fig)
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    texts = fig.axes[1].texts
    assert len(texts) == many and all("↑" in t.get_text() for t in texts[-5:])
    boxes = [t.get_window_extent(renderer) for t in texts]
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)
    shown = [t for t in fig.axes[0].texts if t.get_visible()]  # the curve's point labels: none overprints
    assert shown and all(
        not a.get_window_extent(renderer).overlaps(b.get_window_extent(renderer))
        for a, b in itertools.combinations(shown, 2)
    )
    assert len(fig.axes[0].collections[-1].get_offsets()) == many  # every budget keeps its point
    ticks = [t.get_window_extent(renderer) for t in fig.axes[1].get_xticklabels() if t.get_text()]
    assert all(not a.overlaps(b) for a, b in itertools.combinations(ticks, 2))
    assert ticks or "the bars of a group: c0, c1, c2, c3" in fig.axes[1].get_title(loc="left")


@pytest.mark.parametrize(
    "text, says",
    [
        pytest.param("[1,", "not valid JSON", id="json"),
        pytest.param('{"cells": []}', "not an rbln-build manifest", id="cells"),
        pytest.param('{"cells": {"a": 1}}', "cell 'a' is not an object", id="entry"),
    ],
)
def test_a_compare_manifest_that_is_not_one_is_a_clear_error(
    tmp_path: Any, text: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from rbln_build.reporting._cli import main

    (tmp_path / "old.json").write_text(text)
    (tmp_path / "manifest.json").write_text('{"schema_version": 1, "cells": {}}')
    assert main([str(tmp_path), "--compare", str(tmp_path / "old.json")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'old.json'}: " in err and says in err and "Traceback" not in err
    assert main([str(tmp_path), "--compare"]) == 2 and "--compare needs a manifest" in capsys.readouterr().err


def test_report_arguments(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from rbln_build.reporting._cli import main

    assert main([str(tmp_path), f"build_dir={tmp_path}"]) == 2
    assert "two build directories" in capsys.readouterr().err
    assert main(["--frobnicate"]) == 2 and "usage: rbln-build report [[build_dir=]PATH]" in capsys.readouterr().err


def test_the_grid_picture_outlines_the_changed_and_added_squares_only() -> None:
    columns = [f"0.{i:02d}" for i in range(1, 31)]
    outcomes = [["full_pool"] * len(columns), ["cut"] * len(columns)]
    marks: list[list[str | None]] = [[None] * len(columns), [None] * len(columns)]
    marks[0][3], marks[1][7] = "changed", "added"
    fig = grid_figure(["a", "b"], columns, outcomes, "marked", marks)
    img = PIL.open(io.BytesIO(render(fig))).convert("RGB")
    ax, height = fig.axes[0], img.size[1]

    def dark_on_left_edge(col: int, row: int) -> int:
        """Near-black pixels on a strip just inside the square's left side (its outline's place)."""
        found = 0
        for step in range(-30, 31):
            x, y = ax.transData.transform((col - 0.5 + 0.06, row + step / 100))
            px = img.getpixel((round(x), round(height - y)))
            found += all(ch < 70 for ch in px)
        return found

    assert dark_on_left_edge(3, 0) > 40  # changed: a solid outline
    assert dark_on_left_edge(7, 1) > 10  # added: dashed
    unmarked = [dark_on_left_edge(c, r) for r in (0, 1) for c in range(len(columns)) if marks[r][c] is None]
    assert max(unmarked) == 0
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "\u0394 changed" in legend and "+ added" in legend


def test_report_compare_marks_the_grid_picture_and_its_table() -> None:
    budgets = [round(0.02 * i, 2) for i in range(1, 31)]  # 30 columns: drawn as a picture
    old = {e["cell"]: e for e in [entry("a", b, int(b * 1000), "ok", 40) for b in budgets]}
    new = [entry("a", b, int(b * 1000), "ok", 40 if b != 0.3 else 39) for b in budgets] + [
        entry("b", 0.3, 300, "ok", 4)
    ]
    plain, compared = render_page(view_of(new)).decode(), render_page(view_of(new), old).decode()
    images = [re.findall(r'<img alt="grid of d" src="([^"]+)"', p) for p in (plain, compared)]
    assert len(images[0]) == len(images[1]) == 1 and images[0] != images[1]  # the picture is marked
    marked = re.findall(r'<td class="[^"]*\b(changed|added)\b[^"]*" title="([^":]+):', compared)
    assert sorted(marked) == [("added", "b.d.b0.3"), ("changed", "a.d.b0.3")]
    assert not re.search(r'<td class="[^"]*\b(changed|added)\b', plain)
