"""A review a PR can read: the batch-size PR pair (matrix=plans built with ``matrix.batch_sizes=[8]``,
then ``[4]``: every cell id changes, ``...bs8.b0.3`` -> ``...bs4.b0.3``) reads as 8 changed cells
with their deltas, largest change first, in ``diff``, ``diff --format markdown`` (rendered by
markdown-it-py) and ``report --compare``; a release (its release.json, or its folder) is an input of
both, against another release or against a build."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from test_cli import PLANS, check_ok, rbln

pytestmark = pytest.mark.integration


def check_ok_out(proc: subprocess.CompletedProcess[str], code: int) -> str:
    check_ok(proc, code)
    return proc.stdout


def _expect(batch: int) -> str:
    return f"matrix.expect_failure=[{{cell:qwen3_8b.atom_max_x4.bs{batch}.b0.3,kind:insufficient_memory}}]"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("review")
    for batch in (8, 4):
        args = [*PLANS, f"matrix.batch_sizes=[{batch}]", _expect(batch), f"build_dir=bs{batch}"]
        check_ok(rbln(args, cwd=work))
        check_ok(rbln(["release", f"v{batch}", "--build-dir", f"bs{batch}", "--to", "releases"], cwd=work))
    return work


def test_diff_pairs_the_batch_size_change_one_row_per_cell_largest_first(pair: Path) -> None:
    proc = rbln(["diff", "bs8/manifest.json", "bs4/manifest.json"], cwd=pair)
    check_ok(proc, 1)  # resolved counts changed: review before release
    lines = proc.stdout.splitlines()
    rows = lines[2:-1]
    assert len(rows) == 8 and all("options changed: batch_size 8 -> 4" in r for r in rows), proc.stdout
    assert lines[-1].startswith("0 added, 0 removed, 8 changed (8 by an options change); resolved counts changed")
    assert re.match(r"qwen3_8b\.rebel100\.bs8\.b0\.5 -> qwen3_8b\.rebel100\.bs4\.b0\.5 .* 40 -> 20 \(-20\) ", rows[0])
    assert "63.09 GiB -> 40.59 GiB (-22.51 GiB)" in rows[0]  # the full pool's bytes per device
    rows_json = json.loads(check_ok_out(rbln(["diff", "--json", "bs8", "bs4"], cwd=pair), 1))["rows"]
    deltas = [abs(r["blocks"][1] - r["blocks"][0]) if None not in r["blocks"] else 0 for r in rows_json]
    assert len(rows_json) == 8 and deltas[:6] == sorted(deltas[:6], reverse=True)
    assert {r["was"] for r in rows_json} == {r["cell"].replace(".bs4.", ".bs8.") for r in rows_json}


def test_diff_markdown_renders_one_table_row_per_changed_cell(pair: Path) -> None:
    from markdown_it import MarkdownIt

    text = check_ok_out(rbln(["diff", "bs8", "bs4", "--format", "markdown"], cwd=pair), 1)
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert html.count("<table>") == 1 and html.count("<tr>") == 9  # the header and 8 cells
    assert "<strong>0 added, 0 removed, 8 changed (8 by an options change)" in html
    assert html.count("options changed: batch_size 8 -&gt; 4") == 8
    assert "<code>qwen3_8b.rebel100.bs8.b0.5</code> → <code>qwen3_8b.rebel100.bs4.b0.5</code>" in html


def test_report_compare_shows_the_same_rows(pair: Path) -> None:
    check_ok(rbln(["report", "bs4", "--compare", "bs8/manifest.json"], cwd=pair))
    page = (pair / "bs4" / "report" / "index.html").read_text()
    section = page[page.index('<h2 id="changes">') : page.index('<h2 id="failures">')]
    assert "0 cells added, 0 removed, 8 changed." in section
    assert "8 cells had their build options changed" in section
    assert section.count("options changed: batch_size 8 &rarr; 4") == 8
    assert "40 &rarr; 20 (-20)" in section


def test_a_release_is_an_input_of_diff_and_report_compare(pair: Path) -> None:
    # release against release (the folder, or its release.json): the 7 released cells of each
    out = check_ok_out(rbln(["diff", "releases/v8", "releases/v4/release.json"], cwd=pair), 1)
    assert out.splitlines()[-1].startswith("0 added, 0 removed, 7 changed (7 by an options change)"), out
    # release against a build: the build's expected failure has no released partner: added
    out = check_ok_out(rbln(["diff", "releases/v8", "bs4"], cwd=pair), 1)
    assert out.splitlines()[-1].startswith("1 added, 0 removed, 7 changed (7 by an options change)"), out
    assert "qwen3_8b.atom_max_x4.bs4.b0.3" in out and "added" in out
    check_ok(rbln(["report", "bs4", "--compare", "releases/v8"], cwd=pair))
    page = (pair / "bs4" / "report" / "index.html").read_text()
    assert "1 cells added, 0 removed, 7 changed." in page


def _marked(page: str) -> dict[str, set[str]]:
    """The grid's marked squares: {"changed" | "added": {cell id, ...}} (the id opens each title)."""
    grid = page[page.index('<h2 id="glance">') : page.index('<h2 id="failures">')]
    grid = grid[: grid.index('<h2 id="changes">')] if '<h2 id="changes">' in grid else grid
    out: dict[str, set[str]] = {"changed": set(), "added": set()}
    for classes, cell in re.findall(r'<td class="([^"]+)" title="([^":]+):', grid):
        for kind in set(classes.split()) & set(out):
            out[kind].add(cell)
    return out


def test_report_compare_marks_exactly_the_changed_squares_in_the_grid(pair: Path) -> None:
    rows = json.loads(check_ok_out(rbln(["diff", "--json", "bs8", "bs4"], cwd=pair), 1))["rows"]
    changed = {r["cell"] for r in rows if r["change"] not in ("added", "removed")}
    assert len(changed) == 8
    check_ok(rbln(["report", "bs4", "--compare", "bs8/manifest.json"], cwd=pair))
    page = (pair / "bs4" / "report" / "index.html").read_text()
    assert _marked(page) == {"changed": changed, "added": set()}
    assert "\u0394</strong> (outlined) changed, 8 cells;" in page and "added, 0." in page
    squares = re.findall(r'<td class="[^"]*\bchanged\b[^"]*" title="([^"]+)">(?:<a [^>]*>)?([^<]*)', page)
    assert len(squares) == 8 and all("options changed: batch_size 8 -&gt; 4" in t for t, _ in squares)
    assert all(text.startswith("\u0394 ") for _, text in squares)  # the glyph, not only the outline
    # release against the build: 7 changed, and the build's expected failure added (marked apart)
    check_ok(rbln(["report", "bs4", "--compare", "releases/v8"], cwd=pair))
    marked = _marked((pair / "bs4" / "report" / "index.html").read_text())
    assert marked == {
        "changed": changed - {"qwen3_8b.atom_max_x4.bs4.b0.3"},
        "added": {"qwen3_8b.atom_max_x4.bs4.b0.3"},
    }
    # without --compare nothing is marked
    check_ok(rbln(["report", "bs4"], cwd=pair))
    page = (pair / "bs4" / "report" / "index.html").read_text()
    assert _marked(page) == {"changed": set(), "added": set()} and "Since the compared manifest" not in page
