"""Figures drawn once and reused: ``<build_dir>/report/.figures/<key>.png``.

A report of a 10,000-cell sweep has one pair of figures per compile key and target (plus a grid
picture per device), and drawing them with matplotlib is nearly all of the report's time. A figure
depends only on what it is drawn from, so each is stored under the sha256 of that (as canonical
JSON), the figures, reporting and estimator sources and matplotlib's version; the next report takes the
bytes instead of drawing (the same bytes: figures are deterministic). Files that the last report
did not use are removed, so the folder holds one report's figures; nothing else in it is touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["FigureCache", "FIGURES_DIR"]

FIGURES_DIR = ".figures"  # under <build_dir>/report
_NAME = re.compile(r"[0-9a-f]{64}\.png")


@cache
def _code_version() -> str:
    """The sources that decide a figure's pixels: the drawing (this package), the report's composition,
    the estimator, and matplotlib's version."""
    from importlib import metadata

    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for package in ("figures", "reporting", "estimator"):
        for path in sorted((root / package).glob("*.py")):
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    try:
        h.update(metadata.version("matplotlib").encode())
    except metadata.PackageNotFoundError:
        pass
    return h.hexdigest()


class FigureCache:
    """``get(what, draw)``: the PNG for ``what`` (JSON data that determines it), drawn by ``draw()``
    only when the folder does not hold it. ``folder=None``: always draw, store nothing."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.used: set[str] = set()
        self.drawn = 0

    def get(self, what: Any, draw: Callable[[], bytes]) -> bytes:
        if self.folder is None:
            self.drawn += 1
            return draw()
        text = json.dumps({"what": what, "code": _code_version()}, sort_keys=True, separators=(",", ":"))
        name = hashlib.sha256(text.encode("utf-8")).hexdigest() + ".png"
        self.used.add(name)
        path = self.folder / name
        try:
            data = path.read_bytes()
            if data.startswith(b"\x89PNG\r\n\x1a\n"):
                return data
        except OSError:
            pass
        data = draw()
        self.drawn += 1
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f".tmp-{name}-{os.getpid()}"
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError:
            pass  # a cache: the report is written all the same
        return data

    def prune(self) -> None:
        """Remove the figures (and temporary files) of earlier reports that this one did not use."""
        if self.folder is None or not self.folder.is_dir():
            return
        for path in self.folder.iterdir():
            ours = _NAME.fullmatch(path.name) or path.name.startswith(".tmp-")
            if ours and path.name not in self.used and path.is_file() and not path.is_symlink():
                try:
                    path.unlink()
                except OSError:
                    pass
