"""No-op rebuild time of rbln-build against the time Hydra and doit take to start.

    python bench/noop.py [--root build/bench] [--repeat 5] [--json]

Builds (once, if needed) the default matrix and a 1,000-cell matrix (5 large recipes x 2 devices x
100 budgets: plans, no torch export) into ``<root>/default`` and ``<root>/k1000``, then times
``--repeat`` no-op rebuilds of each as subprocesses, side by side with

* ``python -c "import hydra, doit"``  -- importing the two frameworks;
* a bare ``@hydra.main`` app that composes conf/config.yaml and returns -- Hydra's own start-up
  with our config (two compositions, as every Hydra app does);

and ``rbln-build status`` (the CI drift check: compose, expand, read the Store; no doit, no lock) on
the same up-to-date build dirs, and reports medians and ratios. Every no-op run is checked: nothing
compiled, nothing redone; every status run must exit 0 (everything up to date).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGETS = "[" + ",".join(str(round(i / 100, 2)) for i in range(1, 101)) + "]"
K1000 = [
    "matrix=plans",
    "matrix.models=[qwen3_8b,llama3_2_1b,llama3_1_8b,mistral_7b_v0_1,qwen3_0_6b]",
    "matrix.devices=[atom_max_x4,rebel100]",
    f"matrix.budgets={BUDGETS}",
    "matrix.expect_failure=[]",  # many small budgets cannot fit: those cells fail, as they should
]
HYDRA_APP = f"""
import hydra
from rbln_build.config._config import register_configs
register_configs()
@hydra.main(version_base="1.3", config_path={str(REPO / "conf")!r}, config_name="config")
def app(cfg):
    pass
app()
"""


def timed(cmd: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - started, proc


def rbln(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "rbln_build.cli", "progress=false", *args]


def ensure_built(name: str, args: list[str], root: Path) -> float | None:
    build = root / name
    if (build / "manifest.json").is_file():
        return None
    took, proc = timed(rbln([*args, f"build_dir={build}"]), REPO)
    if not (build / "manifest.json").is_file():
        sys.exit(f"building {name} failed:\n{proc.stdout}\n{proc.stderr}")
    return took


def noop_times(name: str, args: list[str], root: Path, repeat: int) -> list[float]:
    build = root / name
    # One untimed run first: it brings the build up to date if the source tree changed since the
    # build (keys follow the code), and warms the file cache like every later run.
    timed(rbln([*args, f"build_dir={build}"]), REPO)
    times = []
    for _ in range(repeat):
        took, proc = timed(rbln([*args, f"build_dir={build}"]), REPO)
        summary = json.loads((build / "summary.json").read_text())
        if summary["compiled"] or summary["redone_cells"]:
            sys.exit(f"{name}: the no-op rebuild redid work: {summary}")
        times.append(took)
    return times


def status_times(name: str, args: list[str], root: Path, repeat: int) -> list[float]:
    build = root / name
    times = []
    for _ in range(repeat):
        took, proc = timed([sys.executable, "-m", "rbln_build.cli", "status", *args, f"build_dir={build}"], REPO)
        if proc.returncode != 0:
            sys.exit(f"{name}: status says the build is not up to date:\n{proc.stdout[-2000:]}\n{proc.stderr}")
        times.append(took)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=REPO / "build" / "bench")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    root = opts.root.resolve()
    fresh = {"default": ensure_built("default", [], root), "k1000": ensure_built("k1000", K1000, root)}
    baselines = {
        "import hydra, doit": [
            timed([sys.executable, "-c", "import hydra, doit"], REPO)[0] for _ in range(opts.repeat)
        ],
        "bare hydra app (our config)": [timed([sys.executable, "-c", HYDRA_APP], REPO)[0] for _ in range(opts.repeat)],
    }
    runs = {
        "no-op default matrix (18 cells)": noop_times("default", [], root, opts.repeat),
        "no-op 1,000-cell matrix": noop_times("k1000", K1000, root, opts.repeat),
        "status default matrix (18 cells)": status_times("default", [], root, opts.repeat),
        "status 1,000-cell matrix": status_times("k1000", K1000, root, opts.repeat),
    }
    base = statistics.median(baselines["import hydra, doit"])
    hydra_app = statistics.median(baselines["bare hydra app (our config)"])
    rows = []
    for label, times in {**baselines, **runs}.items():
        med = statistics.median(times)
        rows.append(
            {
                "what": label,
                "median_s": round(med, 3),
                "min_s": round(min(times), 3),
                "x_import": round(med / base, 2),
                "x_hydra_app": round(med / hydra_app, 2),
            }
        )
    if opts.json:
        print(json.dumps({"repeat": opts.repeat, "fresh_build_s": fresh, "rows": rows}, indent=2))
        return
    for name, took in fresh.items():
        if took is not None:
            print(f"fresh build of {name}: {took:.1f}s")
    width = max(len(r["what"]) for r in rows)
    print(f"{'what'.ljust(width)}  median    min  x import  x hydra app   (n={opts.repeat})")
    for r in rows:
        print(
            f"{r['what'].ljust(width)}  {r['median_s']:5.2f}s {r['min_s']:5.2f}s  {r['x_import']:7.2f}  {r['x_hydra_app']:10.2f}"
        )


if __name__ == "__main__":
    main()
