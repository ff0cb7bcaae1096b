"""Regenerate docs/report.png and the sample build log in docs/reporting.md from the current code.

    python scripts/docs_report.py                    # builds the default matrix in a temporary folder
    python scripts/docs_report.py --build-dir /tmp/shot   # or there (kept; a second run reuses its cache
                                                          # and leaves the sample log as it was)

1. ``rbln-build build_dir=DIR progress=false`` (the default matrix): its plain log is the sample.
2. ``rbln-build report DIR``.
3. Headless Chromium (``/usr/bin/chromium``; Debian: ``apt-get install -y chromium``) takes the
   top of the page at 1100 px wide, reduced to 256 colors: docs/report.png.
4. The lines between ``<!-- docs_report:plain-log -->`` and ``<!-- /docs_report -->`` in
   docs/reporting.md become the build's first compile line, a count line and its last count line.

Nothing is fetched (HF_HUB_OFFLINE=1; Chromium's requests go to a closed local port).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reporting.md"
SHOT = ROOT / "docs" / "report.png"
START, END = "<!-- docs_report:plain-log -->", "<!-- /docs_report -->"
FLAGS = (
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


def rbln(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    env.pop("CI", None)
    return subprocess.run([sys.executable, "-m", "rbln_build.cli", *args], capture_output=True, text=True, env=env)


def sample(log: str) -> str | None:
    """The sample (first compile line, a count line, the last one); None when nothing was compiled."""
    lines = log.splitlines()
    first = next((ln for ln in lines if ln.startswith("[compile ")), None)
    if first is None:
        return None
    counts = [ln for ln in lines if ln.startswith("[progress ")]
    middle = next((ln for ln in counts if "running" in ln), counts[0])
    return "\n".join(["```", first, middle, counts[-1], "```"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", type=Path, help="build here (kept); default: a temporary folder")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rbln-docs-report-"))
    build = args.build_dir or work / "build"
    try:
        built = rbln([f"build_dir={build}", "progress=false"])
        if built.returncode != 0:
            print(built.stderr[-4000:], file=sys.stderr)
            print(f"docs_report: the default matrix did not build (exit {built.returncode}).", file=sys.stderr)
            return 1
        reported = rbln(["report", str(build)])
        if reported.returncode != 0:
            print(reported.stderr, file=sys.stderr)
            return 1
        page = build / "report" / "index.html"
        png = work / "page.png"
        subprocess.run(
            [args.chromium, *FLAGS, f"--user-data-dir={work / 'profile'}", "--window-size=1100,1560",
             f"--screenshot={png}", page.resolve().as_uri()],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if not png.is_file():
            print(f"docs_report: Chromium ({args.chromium}) took no screenshot.", file=sys.stderr)
            return 1
        from PIL import Image

        image = Image.open(png).convert("RGB").crop((0, 0, 1100, 1502))
        image.quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE).save(SHOT, optimize=True)
        text = DOC.read_text(encoding="utf-8")
        block = re.compile(re.escape(START) + r"\n.*?\n" + re.escape(END), re.S)
        if not block.search(text):
            print(f"docs_report: {DOC} has no {START} ... {END} block.", file=sys.stderr)
            return 1
        log = sample(built.stderr)
        if log is None:  # a reused --build-dir: its build was up to date, so there is no log to show
            print(f"wrote {SHOT.relative_to(ROOT)}; the build compiled nothing (its cache was reused), so the")
            print(f"sample log in {DOC.relative_to(ROOT)} is left as it was (a fresh --build-dir records it)")
            return 0
        DOC.write_text(block.sub(lambda _: f"{START}\n{log}\n{END}", text), encoding="utf-8")
        print(f"wrote {SHOT.relative_to(ROOT)} and the sample log in {DOC.relative_to(ROOT)}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
