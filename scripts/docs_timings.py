"""Measure the timings the README quotes, so they come from a run and not from memory.

    python scripts/docs_timings.py            # the quick start's build: fresh, then a no-op
    python scripts/docs_timings.py --suite    # also the README's test command (python -m pytest)

Each build runs in a fresh temporary directory (build_dir and the inventory cache inside it) with
``progress=false``; the wall time of each command is printed, with the machine's load average so a
reader can tell a quiet run from a busy one. Nothing is written into the repository.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int]:
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", action="store_true", help="also time `python -m pytest` (the README's test run)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rbln-build-timings-") as tmp:
        work = Path(tmp)
        env = dict(os.environ, HF_HUB_OFFLINE="1", RBLN_BUILD_CACHE=str(work / "inventory"))
        build = [sys.executable, "-m", "rbln_build.cli", f"build_dir={work / 'build'}", "progress=false"]
        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        fresh, rc = timed(build, work, env)
        print(f"default matrix, fresh build: {fresh:.1f} s (exit {rc})")
        noop, rc = timed(build, work, env)
        print(f"default matrix, no-op rebuild: {noop:.1f} s (exit {rc})")
        if args.suite:
            suite, rc = timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], ROOT, env)
            print(f"python -m pytest (default suite): {suite / 60:.1f} min (exit {rc})")
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
