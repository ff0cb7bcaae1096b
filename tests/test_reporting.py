"""``rbln-build report`` and ``explain --plot``: what the page holds, that its figures are exact and
decode, that two runs give the same bytes, and the errors (no manifest, no matplotlib).

One real build of ``matrix=plans`` at budgets 0.2, 0.3 and 0.5 (plans: no torch export, seconds)
gives every status: at the full pool, cut below it, failed (0.2 is below Qwen3-8B's floor) and the
declared expected failure.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from memory_helpers import _CACHE, inventory

from rbln_build.estimator import estimate
from rbln_build.figures._curve import request_for
from rbln_build.figures._figures import GRID_COLORS
from rbln_build.reporting import blocks_curve, load_build, plot_explanation
from rbln_build.reporting._data import budget_label, outcome

PIL = pytest.importorskip(
    "PIL.Image",
    reason="Pillow is not installed: it comes with matplotlib, the report extra (pip install 'rbln-build[report]')",
)
matplotlib = pytest.importorskip(
    "matplotlib", reason="matplotlib is not installed: figures need the report extra (pip install 'rbln-build[report]')"
)

REPO = Path(__file__).resolve().parents[1]
PNG_SRC = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def rbln(args: list[str], cwd: Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbln_build.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1", **(extra_env or {})),
        timeout=600,
    )


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("report")
    for name in ("qwen3_8b", "llama3_2_1b"):  # shared with the other tests of this process
        inventory(name)
    shutil.copytree(_CACHE, work / "inventories" / "inventory")
    proc = rbln(
        ["matrix=plans", "matrix.budgets=[0.2,0.3,0.5]", f"build_dir={work / 'build'}"],
        cwd=work,
        extra_env={"RBLN_BUILD_CACHE": str(work / "inventories")},
    )
    assert proc.returncode == 1, proc.stderr  # the 0.2 cells fail below the floor
    return work / "build"


@pytest.fixture(scope="module")
def page(build: Path) -> str:
    proc = rbln(["report", f"build_dir={build}"], cwd=build.parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"report: {build / 'report' / 'index.html'} (12 cells)")
    return (build / "report" / "index.html").read_text(encoding="utf-8")


def cells(build: Path) -> dict[str, dict[str, Any]]:
    return json.loads((build / "manifest.json").read_text())["cells"]  # type: ignore[no-any-return]


def test_the_build_covers_every_status(build: Path) -> None:
    assert {outcome(e) for e in cells(build).values()} == {"full_pool", "cut", "failed", "expected_failure"}


def test_the_failure_summary_groups_by_kind_before_the_ids(build: Path, tmp_path: Path) -> None:
    copy = tmp_path / "build"
    shutil.copytree(build, copy, symlinks=True)
    proc = rbln(["matrix=plans", "matrix.budgets=[0.2,0.3,0.5]", f"build_dir={copy}"], cwd=tmp_path)
    assert proc.returncode == 1
    err = proc.stderr
    assert (
        "2 failed cell(s) by kind:\n  insufficient_memory       2  e.g. qwen3_8b.atom_max_x4.b0.2: Insufficient" in err
    )
    assert err.index("failed cell(s) by kind") < err.index("2 failed cell(s): qwen3_8b.atom_max_x4.b0.2, ")


def test_the_page_names_every_cell_and_its_status(build: Path, page: str) -> None:
    for cid in cells(build):
        assert f"<code>{cid}</code>" in page, cid
        assert f'title="{cid}: ' in page, cid  # its square in the grid
    for heading in ("The matrix at a glance", "Failures", "Blocks vs budget", "Cells", "Compile keys and inputs"):
        assert heading in page
    failed = cells(build)["qwen3_8b.rebel100.b0.2"]
    assert failed["error"].replace("`", "&#x60;") in page or failed["error"] in page.replace("&#x27;", "'")
    # the budget that fixes it is the breakdown's floor budget, rounded up to 4 decimals
    assert f"({failed['budget_for_floor']['bytes']:,} B per device) for the floor of 9 blocks" in page
    assert "<script" not in page and "http://" not in page and "https://" not in page


def test_the_page_documents_the_toolchain_of_the_build(build: Path, page: str) -> None:
    toolchains = {json.dumps(e["inputs"]["toolchain"], sort_keys=True) for e in cells(build).values()}
    assert toolchains and all(html.escape(t) in page for t in toolchains)
    assert "not recorded" not in page


def test_a_build_without_a_deployment_has_no_deployment_section(page: str) -> None:
    assert 'id="deployments"' not in page and 'href="#deployments"' not in page


def test_the_images_decode(build: Path, page: str) -> None:
    images = PNG_SRC.findall(page)
    groups = load_build(build).groups
    assert len(images) == 2 * len(groups) == 8
    for data in images:
        img = PIL.open(io.BytesIO(base64.b64decode(data)))
        img.load()
        assert img.format == "PNG" and img.size[0] > 400 and img.size[1] > 200
        assert len(img.getcolors(1 << 20) or []) > 10  # drawn, not a blank canvas
        assert "Software" not in img.info  # matplotlib's version is not written into the file


def _step_value(xs: list[int], ys: list[int], x: int) -> int:
    value = ys[0]
    for xi, yi in zip(xs, ys, strict=True):
        if xi <= x:
            value = yi
    return value


def test_the_drawn_curve_passes_through_every_cell_and_the_floor_and_full_pool(build: Path) -> None:
    from rbln_build.figures._figures import curve_figure

    checked = 0
    for group in load_build(build).groups:
        assert group.report is not None, group.problem
        curve = blocks_curve(group.report, group.npu, group.num_devices, group.attention)
        fig = curve_figure(curve, [], group.slug)
        (line,) = [ln for ln in fig.axes[0].lines if ln.get_label() == "kvcache_num_blocks"]
        xs, ys = [int(x) for x in line.get_xdata()], [int(y) for y in line.get_ydata()]
        assert line.get_drawstyle() == "steps-post" and xs[0] == 0 and xs[-1] == curve.available_bytes
        for e in group.cells:
            value = _step_value(xs, ys, e["budget_bytes"])
            if e["kvcache_num_blocks"] is not None:
                assert value == e["kvcache_num_blocks"], e["cell"]
            else:  # failed below the floor: the curve is below it there
                assert value < e["num_min_blocks"], e["cell"]
            checked += 1
        floor, full = curve.floor_bytes, curve.full_bytes
        assert floor == group.cells[0]["budget_for_floor"]["bytes"]
        assert full == group.cells[0]["budget_for_full_pool"]["bytes"]
        assert _step_value(xs, ys, floor) >= curve.num_min_blocks > _step_value(xs, ys, floor - 1)
        assert _step_value(xs, ys, full) == curve.num_full_blocks > _step_value(xs, ys, full - 1)
    assert checked == 12


def test_the_curve_is_what_the_estimator_resolves_at_any_budget(build: Path) -> None:
    for group in load_build(build).groups:
        assert group.report is not None
        curve = blocks_curve(group.report, group.npu, group.num_devices, group.attention)
        budgets = {x + d for x, _ in curve.steps for d in (-1, 0, 1) if 0 < x + d <= curve.available_bytes}
        budgets |= {curve.available_bytes * i // 97 for i in range(1, 98)}
        for b in sorted(budgets):
            res = estimate(request_for(group.npu, group.num_devices, group.attention, memory_budget=b), group.report)
            assert res.kvcache_num_blocks == curve.blocks_at(b), (group.slug, b, res.error)


def test_two_runs_give_identical_bytes_wherever_the_build_is(build: Path, page: str, tmp_path: Path) -> None:
    """A second run, on a copy elsewhere, with --open and no display: the same bytes, the page's URL
    printed, and neither torch, transformers, Hydra, doit nor the build machinery imported."""
    elsewhere = tmp_path / "another" / "place"
    shutil.copytree(build, elsewhere, symlinks=True)
    shutil.rmtree(elsewhere / "report")
    code = (
        "import sys; from rbln_build.reporting import main; assert main(sys.argv[1:]) == 0\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'hydra', 'doit'))\n"
        "mine = sorted(m for m in sys.modules if m.startswith(('rbln_build.config', 'rbln_build.store', 'rbln_build.pipeline', 'rbln_build.commands', 'rbln_build.memory',"
        " 'rbln_build.backends')))\n"
        "assert not heavy and not mine, (heavy[:5], mine)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    proc = subprocess.run(
        [sys.executable, "-c", code, f"build_dir={elsewhere}", "--open"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    index = elsewhere / "report" / "index.html"
    assert f"no browser display here; open {index.resolve().as_uri()}" in proc.stdout
    assert index.read_bytes() == page.encode("utf-8")


def test_a_second_report_reuses_every_figure(build: Path, page: str) -> None:
    """Each figure is drawn once for what determines it (report/.figures/<sha256>.png): the next
    report of the same build takes the same bytes and draws nothing (no figure file is rewritten)."""
    folder = build / "report" / ".figures"
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.glob("*.png")}
    assert len(before) >= 2 * len(load_build(build).groups)  # a (curve, DRAM) pair per compile and target
    proc = rbln(["report", f"build_dir={build}"], cwd=build.parent)
    assert proc.returncode == 0, proc.stderr
    assert (build / "report" / "index.html").read_text(encoding="utf-8") == page
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.glob("*.png")} == before


def test_figures_use_the_font_matplotlib_ships() -> None:
    from matplotlib import font_manager

    from rbln_build.figures._figures import style

    with style():
        found = Path(font_manager.findfont(font_manager.FontProperties(family=matplotlib.rcParams["font.family"])))
    assert found.name == "DejaVuSans.ttf" and Path(matplotlib.get_data_path()) in found.parents


def test_a_missing_compile_entry_is_a_note_not_a_crash(build: Path, tmp_path: Path) -> None:
    copy = tmp_path / "build"
    shutil.copytree(build, copy, symlinks=True)
    key = cells(copy)["qwen3_8b.rebel100.b0.3"]["compile_key"]
    (copy / "cache" / "compile" / key / "entry.json").write_text("{not json", encoding="utf-8")
    proc = rbln(["report", str(copy)], cwd=tmp_path)  # the build directory as a positional path
    assert proc.returncode == 1, proc.stderr  # written, but a compile has no figures: the command says so
    assert "1 compile(s) have no figures" in proc.stderr and "Traceback" not in proc.stderr
    html = (copy / "report" / "index.html").read_text()
    assert "No figures: the compile entry" in html and "unreadable" in html and "run rbln-build to rebuild it" in html
    assert len(PNG_SRC.findall(html)) == 6
    assert (copy / "cache" / "compile" / key / "entry.json").read_text() == "{not json"  # read-only
    shutil.rmtree(copy / "cache" / "compile" / key)  # as gc removes an entry nothing references
    proc = rbln(["report", f"build_dir={copy}"], cwd=tmp_path)
    assert proc.returncode == 1 and "no figures for qwen3_8b on rebel100" in proc.stderr, proc.stderr
    html = (copy / "report" / "index.html").read_text()
    assert "is not in the cache (gc removed it?)" in html and str(tmp_path) not in html  # no absolute path


def test_no_manifest_is_a_clear_error(tmp_path: Path) -> None:
    proc = rbln(["report", f"build_dir={tmp_path / 'nothing'}"], cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"no manifest at {tmp_path / 'nothing' / 'manifest.json'}; build first" in proc.stderr
    bad = rbln(["report", "--frobnicate"], cwd=tmp_path)
    assert bad.returncode == 2 and "cannot read argument '--frobnicate'" in bad.stderr


def test_without_matplotlib_the_error_names_the_extra(build: Path, tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"  # import matplotlib now raises ImportError
        "from rbln_build.cli import main; sys.argv = ['rbln-build', 'report', sys.argv[1]]; main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, f"build_dir={build}"], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "pip install 'rbln-build[report]'" in proc.stderr


# -- explain --plot ----------------------------------------------------------------------------------


@pytest.fixture
def warm_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    inventory("qwen3_8b")
    shutil.copytree(_CACHE, tmp_path / "inventory")
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path))
    return tmp_path


def test_explain_plot_draws_a_png_and_an_svg_identically_twice(
    warm_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rbln_build.memory import explain

    for name in ("a.png", "b.png", "a.svg"):
        argv = ["model=qwen3_8b", "device=rebel100", "--plot", str(warm_cache / name)]
        assert explain.main(argv, plot_with=plot_explanation) == 0
    out = capsys.readouterr().out
    assert "0.3      45,097,156,608  21" in out  # the table is printed as without --plot
    assert (warm_cache / "a.png").read_bytes() == (warm_cache / "b.png").read_bytes()
    img = PIL.open(warm_cache / "a.png")
    assert img.size == (1200, 400) and len(img.getcolors(1 << 20) or []) > 10
    svg = (warm_cache / "a.svg").read_text()
    assert svg.startswith("<?xml") and "<dc:date>" not in svg and "Matplotlib v" not in svg


def test_svg_figures_are_byte_identical() -> None:
    from rbln_build.estimator import AllocationReport
    from rbln_build.figures._figures import Point, curve_figure, render

    report = AllocationReport.from_json(
        {
            "alloc": {"prefill": {"weights": [[3 << 30]]}},
            "kv_tensors": {"k": {"can_resize": True, "sizes": [[96 << 20]]}},
        }
    )
    attention = {
        "attn_impl": "flash_attn",
        "batch_size": 2,
        "kvcache_block_size": 4096,
        "kvcache_partition_len": 4096,
        "max_seq_len": 16384,
        "prefill_chunk_size": 128,
    }
    curve = blocks_curve(report, "RBLN-CA25", 1, attention)
    svgs = {render(curve_figure(curve, [Point("0.5", 8 << 30, 8, "full_pool")], "t"), "svg") for _ in range(2)}
    assert len(svgs) == 1 and b'id="' in svgs.pop()  # ids come from svg.hashsalt, not from random


def test_explain_plot_rejects_another_format(warm_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rbln_build.memory import explain

    jpg = ["model=qwen3_8b", "device=rebel100", "--plot", str(warm_cache / "x.jpg")]
    assert explain.main(jpg, plot_with=plot_explanation) == 2
    assert "must end in .png or .svg" in capsys.readouterr().err
    assert explain.main(["model=qwen3_8b", "device=rebel100", "--plot"], plot_with=plot_explanation) == 2
    assert "--plot needs a file name" in capsys.readouterr().err
    assert explain.main(jpg) == 2  # memory/ cannot draw by itself: the entry point injects the drawing
    assert "--plot is not available from this entry point" in capsys.readouterr().err


def test_budget_labels_keep_the_type() -> None:
    assert [budget_label(b) for b in (None, 0.3, 1, 1.0, "10GB")] == ["null", "0.3", "1", "1.0", "10GB"]


# -- the page in a real browser ------------------------------------------------------------------------

CHROMIUM_FLAGS = (  # headless, and no network: every request would go to a closed local port
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-pings",
    "--disable-default-apps",
    "--dns-prefetch-disable",
    "--proxy-server=http://127.0.0.1:9",
)


@pytest.mark.slow
def test_the_page_renders_in_headless_chromium(build: Path, page: str, tmp_path: Path) -> None:
    browser = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
    if browser is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install -y chromium); .ci/run installs it")
    shot = tmp_path / "page.png"
    proc = subprocess.run(
        [
            browser,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1280,2400",
            f"--screenshot={shot}",
            (build / "report" / "index.html").resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert shot.is_file(), f"no screenshot (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
    img = PIL.open(shot).convert("RGB")
    assert img.size == (1280, 2400)
    gray = img.convert("L")
    dark = sum(gray.histogram()[:128]) / (img.size[0] * img.size[1])
    assert dark > 0.005, f"the page looks blank ({dark:.2%} dark pixels)"  # text, tables and plot lines
    colors = img.getcolors(1 << 24) or []
    grid = {hex_rgb(GRID_COLORS[k]) for k in ("full_pool", "cut", "failed")}  # full pool, cut, failed squares
    assert grid <= {c for _, c in colors}, "the matrix grid's colors are not on the page"
    assert len(colors) > 200  # anti-aliased text and the embedded figures, not a flat page


def hex_rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def synthetic(n_budgets: int) -> list[dict[str, Any]]:
    """Manifest-shaped entries of one model on one device over ``n_budgets`` budgets: the first third
    fails below the floor, the rest is cut, the last is the full pool."""
    out = []
    for i in range(1, n_budgets + 1):
        budget = round(i / n_budgets, 4)
        blocks = None if i <= n_budgets // 3 else (40 if i == n_budgets else 20)
        out.append(
            {
                "cell": f"m.d.b{budget}",
                "memory_budget": budget,
                "budget_bytes": i * 2**30,
                "compile_key": "k" * 64,
                "inputs": {
                    "model": "m",
                    "device": "d",
                    "npu": "RBLN-CR03",
                    "num_devices": 1,
                    "build_options": {},
                    "kvcache_num_blocks": 0,
                },
                "status": "failed" if blocks is None else "ok",
                "kvcache_num_blocks": blocks,
                "num_full_blocks": 40,
                "num_min_blocks": 9,
                "error_kind": "insufficient_memory" if blocks is None else None,
                "error": "Insufficient memory ..." if blocks is None else None,
                "budget_for_floor": {"blocks": 9, "bytes": 123 * 2**30, "fraction": 0.8786, "reason": None},
            }
        )
    return out


@pytest.mark.parametrize("budgets, picture", [pytest.param(6, False, id="table"), pytest.param(60, True, id="wide")])
def test_a_wide_grid_is_a_picture_and_failures_are_grouped(budgets: int, picture: bool) -> None:
    from rbln_build.reporting._data import BuildView
    from rbln_build.reporting._page import _failures, _grid

    entries = synthetic(budgets)
    view = BuildView("0" * 64, entries, [], {})
    grid = _grid(view)
    assert ("<img" in grid and "<details><summary>the grid as a table (60 columns)" in grid) is picture
    for e in entries:
        assert f'title="{e["cell"]}: ' in grid
    if picture:
        img = PIL.open(io.BytesIO(base64.b64decode(PNG_SRC.search(grid).group(1))))  # type: ignore[union-attr]
        assert img.size[0] == 1000
    failures = _failures(view)
    failed = budgets // 3
    assert f"{failed} cells: {failed} failed (insufficient_memory)." in failures
    assert failures.count("<tr>") == 2  # the header and one row for the compile's one kind
    more = f"and {failed - 1} more, budgets {entries[0]['memory_budget']} .. {entries[failed - 1]['memory_budget']}"
    assert more in failures and "memory_budget &ge; 0.8786" in failures


def test_a_manifest_from_elsewhere_is_a_clear_error(tmp_path: Path) -> None:
    for text, says in [
        ('{"schema_version": 2, "cells": {}}', "has schema_version 2; this rbln-build reads 1"),
        ('{"schema_version": 1, "cells": {"a": {"cell": "a"}}}', "has a cell entry without the fields"),
        ("[1, 2", "manifest.json: not valid JSON"),
    ]:
        (tmp_path / "manifest.json").write_text(text)
        proc = rbln(["report", f"build_dir={tmp_path}"], cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and says in proc.stderr, proc.stderr


def test_explain_works_without_matplotlib_until_asked_to_plot(warm_cache: Path) -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from rbln_build.cli import main; sys.argv = ['rbln-build', 'explain', *sys.argv[1:]]; main()"
    )
    env = dict(os.environ, RBLN_BUILD_CACHE=str(warm_cache), HF_HUB_OFFLINE="1")
    table = subprocess.run(
        [sys.executable, "-c", code, "model=qwen3_8b", "device=rebel100"], capture_output=True, text=True, env=env
    )
    assert table.returncode == 0 and "0.3      45,097,156,608  21" in table.stdout, table.stderr
    plot = subprocess.run(
        [sys.executable, "-c", code, "model=qwen3_8b", "device=rebel100", "--plot", str(warm_cache / "q.png")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert plot.returncode == 2 and "Traceback" not in plot.stderr
    assert "pip install 'rbln-build[report]'" in plot.stderr and not (warm_cache / "q.png").exists()


def chromium(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    browser = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
    if browser is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install -y chromium); .ci/run installs it")
    return subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_a_thousand_cell_sweep_with_compare_renders_in_headless_chromium(build: Path, tmp_path: Path) -> None:
    """A real 1,000-cell sweep (matrix=plans: 2 models x 2 devices x 250 budgets) reported with --compare against the
    module's 12-cell build: Chromium draws the grid pictures (their status colors are on screen) and
    its DOM holds the contents, the comparison section and a link from every grid square."""
    sweep = tmp_path / "sweep"
    budgets = ",".join(str(round(i / 250, 4)) for i in range(1, 251))
    proc = rbln(
        ["matrix=plans", f"matrix.budgets=[{budgets}]", f"build_dir={sweep}"],
        cwd=tmp_path,
        extra_env={"RBLN_BUILD_CACHE": str(build.parent / "inventories")},
    )
    assert proc.returncode == 1 and len(cells(sweep)) == 1000, proc.stderr[-3000:]  # the low budgets fail
    report = rbln(["report", str(sweep), "--compare", str(build / "manifest.json")], cwd=tmp_path)
    assert report.returncode == 0 and "(1000 cells)" in report.stdout, report.stderr
    url = (sweep / "report" / "index.html").resolve().as_uri()
    shot = tmp_path / "page.png"
    chromium(["--window-size=1280,2400", f"--screenshot={shot}", url], tmp_path)
    assert shot.is_file()
    img = PIL.open(shot).convert("RGB")
    on_screen = {c for _, c in img.getcolors(1 << 24) or []}
    from rbln_build.figures._figures import OUTCOME_COLORS

    for status in ("full_pool", "cut", "failed"):  # the grid pictures, 500 cells each
        assert hex_rgb(OUTCOME_COLORS[status]) in on_screen, f"no {status} squares on screen"
    dom = chromium(["--dump-dom", url], tmp_path).stdout
    assert "<nav><strong>Contents</strong>" in dom and 'id="changes"' in dom
    assert "1000 cells: " in dom and "grid of atom_max_x4" in dom
    assert dom.count("cells added, ") == 1 and "Resolved block counts changed" in dom
    page = (sweep / "report" / "index.html").read_text(encoding="utf-8")
    assert page.count('<a href="#') >= 1000  # every square of the folded tables links to its figures
