"""``rbln-build report [build_dir=PATH] [--open]``: write ``<build_dir>/report/index.html``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..errors import RblnBuildError, UserError

__all__ = ["main", "write_report", "write_file", "REPORT_DIR"]

REPORT_DIR = "report"
USAGE = """\
usage: rbln-build report [[build_dir=]PATH] [--compare OLD] [--open] [--json]

Write PATH/report/index.html (default build_dir: build) from the build's manifest.json and the
compile entries in its cache: the matrix at a glance, the failures and the budget that fixes each,
blocks vs budget and DRAM per chiplet for every compile, every cell, the compile keys and inputs.
One self-contained file (figures embedded), no network, no script; the same manifest gives the
same bytes. Needs matplotlib: pip install 'rbln-build[report]'.

  build_dir=PATH   the build directory (as given to rbln-build; PATH alone works too)
  --compare OLD    add a section with what changed since OLD (an earlier manifest.json, a release's
                   release.json, or the folder holding one): counts by status, one row per changed
                   cell with its deltas, cells added and removed, resolved counts and failures;
                   the grid marks the changed squares (outlined) and the added ones (dashed)
  --open           open the page in a browser when there is a display; else print its file:// URL
  --json           print the outcome (the page's path, cells, compiles without figures) as JSON
  -h, --help       this text

Exit status: 0 written; 1 written, but some compiles have no figures (their entries are missing or
unreadable: stderr and the page say which); 2 a usage error, no manifest, or matplotlib missing.
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


def write_report(build_dir: Path, compare: Path | None = None) -> tuple[Path, int, list[str]]:
    """Render the report of ``build_dir`` (with a comparison against the manifest ``compare``);
    returns (index.html path, number of cells, why each compile without figures has none)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:  # checked without importing it (figures may be cached)
        from ..figures import require_matplotlib

        require_matplotlib()  # raises MissingExtra with the install hint
    from ..figures import FIGURES_DIR, FigureCache
    from ._data import load_build, read_old_manifest
    from ._page import render_page

    old = None if compare is None else read_old_manifest(Path(compare))
    view = load_build(Path(build_dir))
    path = Path(build_dir) / REPORT_DIR / "index.html"
    figures = FigureCache(path.parent / FIGURES_DIR)
    write_file(path, render_page(view, old, figures))
    figures.prune()
    return path, len(view.entries), [f"{g.title}: {g.problem}" for g in view.groups if g.problem]


def _has_display() -> bool:
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _parse(argv: list[str]) -> tuple[Path, bool, Path | None]:
    build_dir: Path | None = None
    open_it, compare = False, None
    args = iter(argv)
    for arg in args:
        if arg == "--json":
            continue  # main's
        if arg == "--open":
            open_it = True
        elif arg == "--compare" or arg.startswith("--compare="):
            value = arg.partition("=")[2] if "=" in arg else next(args, "")
            if not value:
                raise UserError("report: --compare needs a manifest, e.g. --compare release/manifest.json.")
            compare = Path(value)
        elif arg.startswith("build_dir=") or (arg and not arg.startswith("-") and "=" not in arg):
            value = arg.partition("=")[2] if arg.startswith("build_dir=") else arg
            if not value:
                raise UserError("report: build_dir= is empty; write build_dir=PATH.")
            if build_dir is not None:
                raise UserError(f"report: two build directories ({build_dir} and {value}); give one.")
            build_dir = Path(value)
        else:
            raise UserError(f"report: cannot read argument {arg!r}; usage: {USAGE.splitlines()[0][7:]}.")
    return build_dir or Path("build"), open_it, compare


def main(argv: list[str]) -> int:
    """Entry point of ``rbln-build report ARGS`` (``argv`` excludes the ``report`` word)."""
    if any(a in ("-h", "--help", "help") for a in argv):
        sys.stdout.write(USAGE)
        return 0
    try:
        build_dir, open_it, compare = _parse(argv)
        path, cells, missing = write_report(build_dir, compare)
    except RblnBuildError as error:
        text = " ".join(str(error).split())  # one line, whatever a path held
        sys.stderr.write(f"rbln-build {text}\n" if text.startswith("report:") else f"rbln-build report: {text}\n")
        return 2
    url = path.resolve().as_uri()
    if "--json" in argv:
        out = {"report": str(path), "cells": cells, "compare": None if compare is None else str(compare)}
        print(json.dumps({**out, "missing_figures": missing}, indent=2, sort_keys=True))
        return 1 if missing else 0
    print(f"report: {path} ({cells} cells)")
    for why in missing:
        print(f"rbln-build report: no figures for {why}", file=sys.stderr)
    if missing:
        print(
            f"rbln-build report: {len(missing)} compile(s) have no figures (the page says so where they would be); "
            f"run rbln-build build_dir={build_dir} to rebuild their entries, then report again.",
            file=sys.stderr,
        )
    if open_it:
        if _has_display():
            import webbrowser

            if webbrowser.open(url):
                print(f"opened {url}")
                return 1 if missing else 0
        print(f"no browser display here; open {url}")
    return 1 if missing else 0
