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


def test_a_built_server_is_pictured_card_by_card(tmp_path: Path, env: dict[str, str]) -> None:  # noqa: F811
    build = tmp_path / "build"
    server = "deployment.server={cards:3,pins:{llama3_2_1b:2}}"
    check_ok(rbln(["deployment=qwen3_8b_llama3_2_1b", server, f"build_dir={build}"], cwd=tmp_path, env=env))
    check_ok(rbln(["report", str(build)], cwd=tmp_path, env=env))
    page = (build / "report" / "index.html").read_text()
    record = manifest(build)["deployments"]["qwen3_8b_llama3_2_1b"]
    assert [(c["card"], list(c["models"])) for c in record["cards"]] == [(0, ["qwen3_8b"]), (2, ["llama3_2_1b"])]
    section = page[page.index('<h2 id="deployments">') : page.index('<h2 id="figures">')]
    assert (
        "qwen3_8b_llama3_2_1b: a server of 3 x rebel100 (1 x RBLN-CR03 each), mode budget, fits</h3>"
        "<p class=muted>placed by CP-SAT: proven optimal; card(s) 1 hold no model.</p>"
    ) in section
    assert "<h4>qwen3_8b_llama3_2_1b, card 0 (devices 0): rebel100 (1 x RBLN-CR03), mode budget, fits</h4>" in section
    assert "<h4>qwen3_8b_llama3_2_1b, card 2 (devices 2): rebel100 (1 x RBLN-CR03), mode budget, fits</h4>" in section
    for card in record["cards"]:
        for name, m in card["models"].items():
            assert f"<td>{name}</td><td><code>{m['cell']}</code></td><td>{m['planned_blocks']}</td>" in section
    assert len(re.findall(r"<div style=\"width:420px", section)) == 8  # 4 chiplets on each of the 2 cards in use
