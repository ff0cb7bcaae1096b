"""Bench: the same 8 tiny compile keys at jobs=1, jobs=2 and on a local Ray cluster; then a cold build
that fills a remote cache against a build in a fresh build dir whose compiles all come from it.

    python bench/parallel.py [--out bench/parallel.json] [--ray/--no-ray]

The matrix: tiny_llama and tiny_qwen3 (real torch.export programs) x atom_max_x4, rebel100 x batch
sizes 1, 2, budget null: 8 compile keys, 8 cells. Every run is the real CLI (``python -m
rbln_build.commands._build``) in a fresh build directory, timed wall-clock from start to exit, so each
includes the process start, the imports and the worker start-up (spawned processes import torch
themselves; a local Ray cluster starts and stops inside the run). The runs are checked for equal
manifests (a run whose manifest differs is reported, not timed silently).

The numbers depend on the machine's load: say whether it was shared when you quote them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MATRIX = [
    "matrix=tiny",
    "matrix.models=[tiny_llama,tiny_qwen3]",
    "matrix.devices=[atom_max_x4,rebel100]",
    "matrix.batch_sizes=[1,2]",
    "matrix.budgets=[null]",
    "matrix.expect_failure=[]",
    "progress=false",
]


def run(label: str, work: Path, *overrides: str, env: dict[str, str] | None = None) -> dict[str, object]:
    build = work / re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")  # a plain Hydra override value
    started = time.perf_counter()
    with subprocess.Popen(
        [sys.executable, "-m", "rbln_build.cli", *MATRIX, f"build_dir={build}", *overrides],
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **(env or {})},
    ) as proc:
        assert proc.stdout is not None
        lines = [(time.perf_counter(), line) for line in proc.stdout]
        code = proc.wait()
    took = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"{label}: exit {code}\n" + "".join(ln for _, ln in lines)[-3000:])
    # The end: from the last line of work (the last cell's) to the result table, which the build prints
    # once its workers are gone (their interpreter teardown once held it back 10-16 s).
    table = next(i for i, (_, ln) in enumerate(lines) if ln.startswith("cell "))
    end = lines[table][0] - lines[table - 1][0] if table else 0.0
    summary = json.loads((build / "summary.json").read_text())
    print(f"  {label:<34} {took:7.1f} s   compiled {summary['compiled']}   end {end:.2f} s", flush=True)
    return {
        "label": label,
        "wall_s": round(took, 2),
        "end_s": round(end, 2),
        "compiled": summary["compiled"],
        "manifest": (build / "manifest.json").read_bytes().decode(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rbln-bench-parallel-"))
    ray_env = {
        "RAY_TMPDIR": str(work / "ray"),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    }
    (work / "ray").mkdir()
    print(
        f"8 compile keys, 8 cells (torch.export of two tiny models); {os.cpu_count()} cores; "
        f"load average before: {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    try:
        rows = [run("jobs=1", work, "jobs=1"), run("jobs=2", work, "jobs=2")]
        if not args.no_ray:
            rows.append(
                run("executor=ray (local cluster)", work, "executor=ray", "executor.address=local", env=ray_env)
            )
        remote = f"cache.remote=file://{work / 'remote'}"
        rows.append(run("cold, filling cache.remote", work, "jobs=2", remote))
        rows.append(run("fresh build dir, from cache.remote", work, "jobs=2", remote))
        manifests = {r["manifest"] for r in rows}
        base = rows[0]["wall_s"]
        print("\nrun                                  wall s   vs jobs=1  compiled  end s (last cell -> table)")
        for r in rows:
            print(
                f"{r['label']:<36} {r['wall_s']:7.1f}   {base / r['wall_s']:6.2f}x   {r['compiled']!s:<8}  {r['end_s']:.2f}"  # type: ignore[operator]
            )
        print(f"manifests identical across all runs: {len(manifests) == 1}")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        if args.out:
            result = {
                "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
                "identical_manifests": len(manifests) == 1,
                "runs": [{k: v for k, v in r.items() if k != "manifest"} for r in rows],
            }
            args.out.write_text(json.dumps(result, indent=2) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
