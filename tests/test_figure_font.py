"""Figure bytes do not depend on matplotlib's font cache: a ``fontlist-*.json`` under MPLCONFIGDIR
that lacks the DejaVu Sans matplotlib ships and lists another file under that name first (as a
cache written by a distribution's matplotlib, or one that found /usr/share/fonts first, does) must
give the same PNG and SVG bytes as a fresh cache. Each side runs in its own interpreter, since the
font cache is read once per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "matplotlib", reason="matplotlib is not installed: figures need the report extra (pip install 'rbln-build[report]')"
)

# writes a font cache into argv[1] whose "DejaVu Sans" is matplotlib's DejaVu Serif (other outlines,
# on every machine), with the shipped DejaVu Sans files left out
STALE_CACHE = """
import dataclasses, sys
from pathlib import Path
import matplotlib
from matplotlib import font_manager as fm
ttf = Path(matplotlib.get_data_path(), "fonts", "ttf")
m = fm.fontManager
impostor = fm.ttfFontProperty(fm.get_font(str(ttf / "DejaVuSerif.ttf")))
m.ttflist = [dataclasses.replace(impostor, name="DejaVu Sans")] + [
    e for e in m.ttflist if not (e.name == "DejaVu Sans" and Path(e.fname).parent == ttf)
]
fm.json_dump(m, Path(sys.argv[1]) / f"fontlist-v{fm.FontManager.__version__}.json")
"""

# prints the font a plain lookup finds (before the report's style runs) and the figure's digests
DRAW = """
import hashlib
from pathlib import Path
from matplotlib import font_manager as fm
print(Path(fm.findfont("DejaVu Sans")).name)
from rbln_build.figures import grid_figure, render
from rbln_build.figures._palette import OUTCOME_COLORS
names = list(OUTCOME_COLORS)
fig = grid_figure(names, [f"0.{i:02d}" for i in range(1, 31)], [[n] * 30 for n in names], "every status: Qwen3 0.5B")
print(hashlib.sha256(render(fig, "png")).hexdigest(), hashlib.sha256(render(fig, "svg")).hexdigest())
"""


def _run(code: str, config_dir: Path, *args: str) -> list[str]:
    env = {**os.environ, "MPLCONFIGDIR": str(config_dir)}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")


def test_a_stale_font_cache_does_not_change_figure_bytes(tmp_path: Path) -> None:
    fresh, stale = tmp_path / "fresh", tmp_path / "stale"
    fresh.mkdir()
    stale.mkdir()
    _run(STALE_CACHE, stale, str(stale))

    fresh_font, fresh_digests = _run(DRAW, fresh)[:2]
    stale_font, stale_digests = _run(DRAW, stale)[:2]

    assert fresh_font == "DejaVuSans.ttf"
    assert stale_font == "DejaVuSerif.ttf"  # the stale cache does swap the font for a plain lookup
    assert stale_digests == fresh_digests  # but not for the report's figures
