"""``rbln-build report [build_dir=PATH] [--open]``: write ``<build_dir>/report/index.html``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import RblnBuildError, UserError

__all__ = ["main", "write_report", "write_file", "REPORT_DIR"]

REPORT_DIR = "report"
USAGE = """\
usage: rbln-build report [build_dir=PATH] [--open]

Write PATH/report/index.html (default build_dir: build) from the build's manifest.json and the
compile entries in its cache: the matrix at a glance, the failures and the budget that fixes each,
blocks vs budget and DRAM per chiplet for every compile, every cell, the compile keys and inputs.
One self-contained file (figures embedded), no network, no script; the same manifest gives the
same bytes. Needs matplotlib: pip install 'rbln-build[report]'.

  build_dir=PATH   the build directory (as given to rbln-build)
  --open           open the page in a browser when there is a display; else print its file:// URL
  -h, --help       this text

Exit status: 0 written, 2 a usage error, no manifest, or matplotlib missing.
"""


def write_file(path: Path, data: bytes) -> None:
    """Write through a temporary file in the same folder, then rename: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".tmp-{path.name}-{os.getpid()}"
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_report(build_dir: Path) -> tuple[Path, int]:
    """Render the report of ``build_dir``; returns (index.html path, number of cells)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:  # checked without importing it (figures may be cached)
        from ._figures import require_matplotlib

        require_matplotlib()  # raises MissingExtra with the install hint
    from ._data import load_build
    from ._figcache import FIGURES_DIR, FigureCache
    from ._page import render_page

    view = load_build(Path(build_dir))
    path = Path(build_dir) / REPORT_DIR / "index.html"
    figures = FigureCache(path.parent / FIGURES_DIR)
    write_file(path, render_page(view, figures))
    figures.prune()
    return path, len(view.entries)


def _has_display() -> bool:
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _parse(argv: list[str]) -> tuple[Path, bool]:
    build_dir, open_it = Path("build"), False
    for arg in argv:
        if arg == "--open":
            open_it = True
        elif arg.startswith("build_dir="):
            value = arg.partition("=")[2]
            if not value:
                raise UserError("report: build_dir= is empty; write build_dir=PATH.")
            build_dir = Path(value)
        else:
            raise UserError(
                f"report: cannot read argument {arg!r}; usage: rbln-build report [build_dir=PATH] [--open]."
            )
    return build_dir, open_it


def main(argv: list[str]) -> int:
    """Entry point of ``rbln-build report ARGS`` (``argv`` excludes the ``report`` word)."""
    if any(a in ("-h", "--help", "help") for a in argv):
        sys.stdout.write(USAGE)
        return 0
    try:
        build_dir, open_it = _parse(argv)
        path, cells = write_report(build_dir)
    except RblnBuildError as error:
        sys.stderr.write(
            f"rbln-build {error}\n" if str(error).startswith("report:") else f"rbln-build report: {error}\n"
        )
        return 2
    url = path.resolve().as_uri()
    print(f"report: {path} ({cells} cells)")
    if open_it:
        if _has_display():
            import webbrowser

            if webbrowser.open(url):
                print(f"opened {url}")
                return 0
        print(f"no browser display here; open {url}")
    return 0
