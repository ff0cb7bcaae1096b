"""``rbln-build plan deployment=<name> [--cards N] --plot FILE``: the plan as a picture, drawn with the
report's deployment bars (rbln_build.reporting: ``chiplet_parts``, ``plot_deployment``).

Checked on the written files themselves: a PNG that PIL opens, an SVG that parses and whose text
(matplotlib keeps each label as a comment beside its glyph paths) names every model, each card and
each chiplet's headroom as the plan's JSON gives it; the same plan twice gives the same bytes; a bad
name or place is one line (exit 2), and a plan that does not fit draws nothing (exit 1).
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from memory_helpers import _CACHE, inventory

from rbln_build.inspection._deploy import main

PIL = pytest.importorskip("PIL.Image", reason="Pillow reads the PNG back")
pytest.importorskip("matplotlib", reason="the report extra draws the picture")

MiB = 2**20


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for name in ("tiny_llama", "tiny_qwen3"):
        inventory(name)
    root = tmp_path_factory.mktemp("inv")
    shutil.copytree(_CACHE, root / "inventory")
    return root


@pytest.fixture
def base(cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(cache_dir))
    return ["deployment=tiny_pair", f"build_dir={tmp_path / 'build'}"]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["plan", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def svg_text(path: Path) -> list[str]:
    """The SVG's text: it must parse; matplotlib writes each label as a comment before its paths."""
    parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True))
    root = ET.fromstring(path.read_bytes(), parser=parser)
    assert root.tag.endswith("svg")
    return [str(e.text).strip() for e in root.iter() if e.tag is ET.Comment]


def test_a_png_of_the_plan_is_written_valid_and_the_same_twice(
    base: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "a.png", tmp_path / "b.png"
    code, out, err = run([*base, "--plot", str(first)], capsys)
    assert code == 0 and err == f"plan --plot: wrote {first}\n"
    assert "budget plan:" in out  # the plan is printed as without --plot
    with PIL.open(first) as img:
        img.verify()
    with PIL.open(first) as img:
        assert img.format == "PNG" and img.size[0] >= 600
    code, _, _ = run([*base, "--plot", str(second)], capsys)
    assert code == 0 and first.read_bytes() == second.read_bytes()


def test_an_svg_names_every_model_card_and_headroom(
    base: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the docs' server: 150 MiB left on each ATOM-Max card, one model per card
    server = [*base, "deployment.reservations.0.bytes=16720592896", "--cards", "2"]
    path = tmp_path / "server.svg"
    code, _, _ = run([*server, "--plot", str(path)], capsys)
    assert code == 0
    text = svg_text(path)
    assert "card 0 (devices 0): tiny_llama 8/8 blocks" in text
    assert "card 1 (devices 1): tiny_qwen3 16/16 blocks" in text
    assert {"tiny_llama", "tiny_qwen3", "reserved"} <= set(text)  # the legend
    code, raw, _ = run([*server, "--json"], capsys)
    cards = json.loads(raw)["per_card"]
    rooms = [c["per_chiplet"]["headroom"][0][0] for c in cards]
    headroom = [f"headroom {n // MiB:,} MiB" if n % MiB == 0 else f"headroom {n / MiB:,.2f} MiB" for n in rooms]
    assert [t for t in text if t.startswith("headroom")] == headroom
    again = tmp_path / "again.svg"
    run([*server, "--plot", str(again)], capsys)
    assert again.read_bytes() == path.read_bytes()


def test_one_device_set_with_a_margin_shows_it(
    base: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.svg"
    code, _, _ = run([*base, "deployment.margin=4MB", "--plot", str(path)], capsys)
    assert code == 0
    text = svg_text(path)
    assert {"tiny_llama", "tiny_qwen3", "reserved", "margin", "device 0 chiplet 0"} <= set(text)
    assert any(t.startswith("atom_max (1 x RBLN-CA25): tiny_llama ") for t in text)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("x.jpg", "--plot {path}: the file must end in .png or .svg."),
        ("file/x.png", "--plot {path}: cannot write it ("),
    ],
)
def test_a_bad_file_is_one_line(
    base: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, message: str
) -> None:
    (tmp_path / "file").write_text("a file, not a folder")
    path = tmp_path / name
    code, _, err = run([*base, "--plot", str(path)], capsys)
    assert code == 2 and err.startswith("rbln-build plan: " + message.format(path=path))
    assert err.count("\n") == 1 and not path.exists()
    code, _, err = run([*base, "--plot"], capsys)
    assert code == 2 and err == "rbln-build plan: plan --plot: expected a file after it (a .png or .svg).\n"


def test_a_plan_that_does_not_fit_draws_nothing(
    base: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "x.png"
    code, _, err = run([*base, "deployment.reservations.0.bytes=16800000000", "--plot", str(path)], capsys)
    assert code == 1 and f"plan --plot {path}: the budget plan does not fit; nothing drawn." in err
    assert not path.exists()
