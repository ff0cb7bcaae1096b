"""The report's picture of a built deployment: its models and, per chiplet, what each occupies beside
the reservation, the margin and the headroom, as a table and a stacked bar drawn to the chiplet's
available DRAM (a build without a deployment gets no such section: tests/test_reporting.py)."""

from __future__ import annotations

import re
from pathlib import Path

from test_cli import check_ok, manifest, rbln
from test_deploy_cli import env  # noqa: F401  (the fixture: the models' inventories, copied once)


def test_a_built_deployment_is_pictured_chiplet_by_chiplet(tmp_path: Path, env: dict[str, str]) -> None:  # noqa: F811
    build = tmp_path / "build"
    check_ok(
        rbln(
            ["deployment=qwen3_8b_llama3_2_1b", "deployment.margin=512MB", f"build_dir={build}"], cwd=tmp_path, env=env
        )
    )
    check_ok(rbln(["report", str(build)], cwd=tmp_path, env=env))
    page = (build / "report" / "index.html").read_text()
    record = manifest(build)["deployments"]["qwen3_8b_llama3_2_1b"]
    section = page[page.index('<h2 id="deployments">') : page.index('<h2 id="figures">')]
    assert '<a href="#deployments">Deployments</a>' in page
    assert "qwen3_8b_llama3_2_1b: rebel100 (1 x RBLN-CR03), mode budget, fits</h3>" in section
    for name, m in record["models"].items():
        assert f"<td>{name}</td><td><code>{m['cell']}</code></td><td>{m['planned_blocks']}</td>" in section
    per = record["per_chiplet"]
    bars = re.findall(r"<div style=\"width:420px[^>]*>(.*?)</div>", section)
    assert len(bars) == 4  # one per chiplet of the Rebel100
    for c, bar in enumerate(bars):
        widths = [float(w) for w in re.findall(r"width:([0-9.]+)%", bar)]
        held = per["reserved"][0][c] + per["margin"][0][c] + sum(m["usage"][0][c] for m in record["models"].values())
        assert abs(sum(widths) - 100 * held / per["available"]) < 0.01  # the bar is what is held; the rest is headroom
        assert held + per["headroom"][0][c] == per["available"]
