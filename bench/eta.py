"""How right the time-left estimate is on a fresh build dir: estimate / truth over a real build.

    python bench/eta.py [--root /tmp/rbln-eta] [--jobs 2] [--json]

Builds the default matrix from scratch (a new build dir: no ``progress-history.json``, no cache) in
a child process whose display also samples ``seconds_left()`` every quarter second and at every
event. When the build is over, each sample's truth is the build's end less the sample's time; the
report is the ratio estimate / truth from the first finished compile on, while at least a tenth of
the build is left (in the last seconds the truth is one compile's remainder: see
tests/test_progress.py), and at the first compile. Within 2x is 0.5 <= ratio <= 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    """
    import json, sys, threading, time
    from rbln_build.progress import CompileHistory, LineProgress
    import rbln_build.pipeline._tasks as tasks

    samples, start = [], time.monotonic()

    class Sampled(LineProgress):
        def sample(self):
            if self.compiles_done:
                samples.append((time.monotonic() - start, self.seconds_left()))
        def compile_finished(self, *a, **k):
            n = super().compile_finished(*a, **k)
            self.sample()
            return n
        def cells_finished(self, done):
            super().cells_finished(done)
            self.sample()

    shown = []
    def make(progress, out, history):
        p = Sampled(out, history=CompileHistory(history))
        shown.append(p)
        def tick():  # (not on p.stop: the display replaces it around forks)
            while True:
                time.sleep(0.25)
                p.sample()
        threading.Thread(target=tick, daemon=True).start()
        return p
    tasks.make_progress = make
    from rbln_build.cli import main
    out_file, sys.argv = sys.argv[1], ["rbln-build", *sys.argv[2:]]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    end = time.monotonic() - start
    json.dump({"end": end, "samples": samples, "code": code}, open(out_file, "w"))
    """
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/rbln-eta"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    shutil.rmtree(args.root, ignore_errors=True)
    args.root.mkdir(parents=True)
    out = args.root / "samples.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", CI="1", HOME=str(args.root / "home"))
    cmd = [sys.executable, "-c", CHILD, str(out), f"build_dir={args.root / 'build'}", f"jobs={args.jobs}"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not out.is_file():
        print(proc.stderr[-3000:], file=sys.stderr)
        return 1
    data = json.loads(out.read_text())
    end = data["end"]
    ratios = [
        (t, left / (end - t)) for t, left in data["samples"] if left is not None and end - t >= max(1.0, end / 10)
    ]
    missing = sum(1 for t, left in data["samples"] if left is None and end - t >= max(1.0, end / 10))
    if not ratios:
        print("no estimate was sampled before the last tenth of the build", file=sys.stderr)
        return 1
    first = ratios[0]
    result = {
        "build_s": round(end, 2),
        "jobs": args.jobs,
        "samples": len(ratios),
        "samples_without_estimate": missing,
        "first_compile_at_s": round(first[0], 2),
        "ratio_at_first_compile": round(first[1], 2),
        "ratio_min": round(min(r for _, r in ratios), 2),
        "ratio_max": round(max(r for _, r in ratios), 2),
        "within_2x": all(0.5 <= r <= 2.0 for _, r in ratios),
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for key, value in result.items():
            print(f"{key:28} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
