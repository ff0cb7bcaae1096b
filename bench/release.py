"""``rbln-build verify`` of a 1,000-cell plan release against the build that made it.

    python bench/release.py [--root build/bench-release] [--repeat 5] [--json]

In one run: a clean build of a 1,000-cell plan matrix (bench/noop.py's 5 large recipes x 2 devices,
with 100 budgets from 0.41 to 0.905 so that every cell fits: noop's 0.01..1.0 leave 177 cells that
cannot fit, and a release of those would hold 823), then ``rbln-build release`` of all 1,000 cells
(a failed cell stops the bench), then ``--repeat`` runs of ``rbln-build
verify`` on the release folder, each as a subprocess (start-up included), and one in-process verify
that reports whether torch or transformers was imported. Prints the build's, the release's and the
median verify's wall time, and verify as a fraction of the build.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from noop import K1000  # noqa: E402  (the no-op bench's 1,000-cell matrix: its models and devices)

FITTING = "[" + ",".join(str(round(0.41 + i * 0.005, 3)) for i in range(100)) + "]"  # the largest failing is 0.40
RELEASED_1000 = [*(a for a in K1000 if not a.startswith("matrix.budgets=")), f"matrix.budgets={FITTING}"]

NO_TORCH = """
import sys
from rbln_build.commands._main import dispatch
code = dispatch(["verify", sys.argv[1]])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers"))
print(json.dumps({"code": code, "heavy": heavy}))
"""


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    return time.perf_counter() - started, proc


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rbln_build.cli", *args]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=REPO / "build" / "bench-release")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    root = opts.root.resolve()
    shutil.rmtree(root, ignore_errors=True)  # a clean build: the one that makes the release
    build = root / "k1000"
    build_s, proc = timed(cli("progress=false", *RELEASED_1000, f"build_dir={build}"))
    if not (build / "manifest.json").is_file():
        sys.exit(f"the build failed:\n{proc.stdout[-2000:]}\n{proc.stderr}")
    cells = len(json.loads((build / "manifest.json").read_bytes())["cells"])
    release_s, proc = timed(cli("release", "k1000", "--build-dir", str(build), "--to", str(root / "releases")))
    if proc.returncode != 0:
        sys.exit(f"the release failed:\n{proc.stdout[-2000:]}\n{proc.stderr}")
    body = json.loads((root / "releases" / "k1000" / "release.json").read_bytes())
    verify_times = []
    for _ in range(opts.repeat):
        took, proc = timed(cli("verify", str(root / "releases" / "k1000")))
        if proc.returncode != 0:
            sys.exit(f"verify failed:\n{proc.stdout}\n{proc.stderr}")
        verify_times.append(took)
    _, proc = timed([sys.executable, "-c", "import json\n" + NO_TORCH, str(root / "releases" / "k1000")])
    imported = json.loads(proc.stdout.strip().splitlines()[-1])
    if imported["code"] != 0:
        sys.exit(f"in-process verify failed: {proc.stderr}")
    verify_s = statistics.median(verify_times)
    result = {
        "cells_in_matrix": cells,
        "cells_released": len(body["cells"]),
        "files": len(body["files"]),
        "release_json_bytes": (root / "releases" / "k1000" / "release.json").stat().st_size,
        "build_s": round(build_s, 2),
        "release_s": round(release_s, 2),
        "verify_median_s": round(verify_s, 3),
        "verify_min_s": round(min(verify_times), 3),
        "verify_over_build": round(verify_s / build_s, 4),
        "verify_imports": imported["heavy"],
        "repeat": opts.repeat,
    }
    if opts.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"1,000-cell plan matrix: {cells} cells, {result['cells_released']} released "
        f"({result['files']} files, release.json {result['release_json_bytes']:,} bytes)"
    )
    print(f"clean build            {build_s:7.2f}s")
    print(f"release                {release_s:7.2f}s")
    print(f"verify (median of {opts.repeat})  {verify_s:7.2f}s  (min {min(verify_times):.2f}s)")
    print(f"verify / build         {verify_s / build_s:7.3f}  (the build takes {build_s / verify_s:.1f}x as long)")
    print(f"torch/transformers imported by verify: {', '.join(imported['heavy']) or 'none'}")


if __name__ == "__main__":
    main()
