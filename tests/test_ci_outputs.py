"""A build's machine outputs for CI, through the real CLI on matrix=plans with a backend that fails
one NPU family (tests/plugins FlakyBackend) and one cell declared to fail that builds: ``--junit``
(validated against tests/junit.xsd with xmlschema and read back with junitparser: passed, failed,
expected failure as skipped, unexpected success as failed), the GitHub step summary (rendered as
Markdown by markdown-it-py: its tables are tables), ``--json`` (the summary on stdout), per-compile
seconds and per-cell cost in summary.json, and failures on stderr capped and grouped by kind."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from test_cli import PLANS, check_ok, rbln

from rbln_build.progress import LineProgress

pytestmark = pytest.mark.integration
XSD = Path(__file__).resolve().parent / "junit.xsd"
FLAKY = [
    "matrix.backend=rbln_test_plugins:FlakyBackend",
    "matrix.expect_failure=[{cell:qwen3_8b.atom_max_x4.b0.3,kind:insufficient_memory},"
    "{cell:llama3_2_1b.atom_max_x4.b0.3,kind:insufficient_memory}]",
]


@pytest.fixture(scope="module")
def ci_build(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("ci")
    env = {"RBLN_TEST_FAIL_FAMILY": "RBLN-CR", "GITHUB_STEP_SUMMARY": str(work / "step.md")}
    (work / "step.md").write_text("earlier step\n")  # appended to, never replaced
    proc = rbln([*PLANS, *FLAKY, "--junit", str(work / "junit.xml"), "--json"], cwd=work, env=env)
    check_ok(proc, 1)
    return {"work": work, "proc": proc}


def test_junit_validates_and_says_each_outcome_as_junit_does(ci_build: dict[str, Any]) -> None:
    import xmlschema
    from junitparser import Failure, JUnitXml, Skipped

    path = ci_build["work"] / "junit.xml"
    xmlschema.XMLSchema(str(XSD)).validate(str(path))
    suites = list(JUnitXml.fromfile(str(path)))
    assert len(suites) == 1
    suite = suites[0]
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (8, 5, 0, 1)
    outcome = {case.name: [type(r).__name__ for r in case.result] for case in suite}
    assert outcome == {
        "llama3_2_1b.atom_max_x4.b0.3": ["Failure"],  # declared to fail, built: an unexpected success
        "llama3_2_1b.atom_max_x4.b0.5": [],
        "llama3_2_1b.rebel100.b0.3": ["Failure"],
        "llama3_2_1b.rebel100.b0.5": ["Failure"],
        "qwen3_8b.atom_max_x4.b0.3": ["Skipped"],  # failed as declared: skipped, as pytest writes an xfail
        "qwen3_8b.atom_max_x4.b0.5": [],
        "qwen3_8b.rebel100.b0.3": ["Failure"],
        "qwen3_8b.rebel100.b0.5": ["Failure"],
    }
    cases = {case.name: case for case in suite}
    failure = cases["llama3_2_1b.rebel100.b0.3"].result[0]
    assert isinstance(failure, Failure) and failure.type == "build_failed" and failure.message == "compiler crashed"
    assert cases["llama3_2_1b.atom_max_x4.b0.3"].result[0].type == "unexpected_success"
    skipped = cases["qwen3_8b.atom_max_x4.b0.3"].result[0]
    assert isinstance(skipped, Skipped) and skipped.type == "expected_failure"
    assert skipped.message.startswith("insufficient_memory: Insufficient memory for the required KV cache")
    assert cases["llama3_2_1b.atom_max_x4.b0.5"].classname == "rbln-build.llama3_2_1b"
    assert cases["llama3_2_1b.atom_max_x4.b0.5"].time > 0  # its share of a compile that ran


def test_json_prints_the_summary_with_compile_seconds_and_cell_costs(ci_build: dict[str, Any]) -> None:
    out = json.loads(ci_build["proc"].stdout)
    summary = json.loads((ci_build["work"] / "build" / "summary.json").read_text())
    assert out["manifest"] == str(ci_build["work"] / "build" / "manifest.json")
    assert {k: out[k] for k in summary} == summary  # stdout is summary.json, plus where and how long
    assert (out["cells"], out["failed"], out["expected_failures"]) == (8, 5, 1)
    labels = sorted(c["label"] for c in out["compiles"])
    assert len(labels) == 4 and all(c["seconds"] >= 0 and c["cells_redone"] == 2 for c in out["compiles"])
    assert sorted(out["cell_cost_s"]) == sorted(
        json.loads((ci_build["work"] / "build" / "manifest.json").read_text())["cells"]
    )
    assert "cell " not in ci_build["proc"].stdout.split("{", 1)[0]  # no table before the JSON


def test_the_step_summary_is_appended_and_renders_as_tables(ci_build: dict[str, Any]) -> None:
    from markdown_it import MarkdownIt

    text = (ci_build["work"] / "step.md").read_text()
    assert text.startswith("earlier step\n### rbln-build\n")
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert html.count("<table>") == 3  # counts, failures by kind, slowest compiles
    assert '<td>build_failed</td>\n<td style="text-align:right">4</td>' in html
    assert "<td>unexpected_success</td>" in html and "<code>llama3_2_1b.rebel100.b0.3</code>" in html


def test_failures_on_stderr_are_grouped_by_kind(ci_build: dict[str, Any]) -> None:
    err = ci_build["proc"].stderr
    assert "5 failed cell(s) by kind:" in err
    assert "build_failed             4  e.g. llama3_2_1b.rebel100.b0.3: compiler crashed" in err


def test_failed_cells_get_a_line_each_only_up_to_a_cap() -> None:
    out = io.StringIO()
    progress = LineProgress(out, every_s=3600)
    progress.plan(0, 30)
    progress.cells_finished([(f"c{i:02d}", "FAILED (build_failed)", False) for i in range(25)])
    for i in range(25, 30):
        progress.cell_finished(f"c{i:02d}", "FAILED (build_failed)", False)
    lines = [line for line in out.getvalue().splitlines() if line.startswith("[cell ")]
    assert len(lines) == 10, lines
    assert lines[-1].endswith(
        "(further failed cells are not listed as they come: the end of the run groups them by kind)"
    )
    assert progress.failed == 30


def test_a_junit_path_in_no_folder_is_a_usage_error(tmp_path: Path) -> None:
    proc = rbln([*PLANS, "--junit", str(tmp_path / "nowhere" / "j.xml")], cwd=tmp_path)
    check_ok(proc, 2)
    assert "--junit" in proc.stderr and "folder does not exist" in proc.stderr
    assert not (tmp_path / "build").exists()


def test_init_recipe_add_and_report_say_their_outcome_as_json(ci_build: dict[str, Any], tmp_path: Path) -> None:
    from _checkpoints import make_checkpoint

    out = json.loads(check_out(rbln(["init", "proj", "--json"], cwd=tmp_path)))
    assert out["project"] == "proj" and "proj/rbln-build.yaml" in out["created"]
    assert all((tmp_path / p).is_file() for p in out["created"])
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    out = json.loads(
        check_out(rbln(["recipe", "add", "mine", "--from", str(checkpoint), "--json"], cwd=tmp_path / "proj"))
    )
    assert out["recipe"] == "mine" and any(p.endswith("recipes/mine/recipe.yaml") for p in out["created"])
    assert isinstance(out["tokenizer"], bool)
    # the failed family's compiles have no entries, so no figures: exit 1, and the JSON says which
    out = json.loads(check_out(rbln(["report", "build", "--json"], cwd=ci_build["work"]), 1))
    assert (out["cells"], out["compare"], out["report"]) == (8, None, "build/report/index.html")
    assert len(out["missing_figures"]) == 2 and all("on rebel100" in m for m in out["missing_figures"])


def check_out(proc: Any, code: int = 0) -> str:
    check_ok(proc, code)
    return str(proc.stdout)
