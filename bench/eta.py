"""How right the time-left estimate is on a fresh build dir: estimate / truth over a real build.

    python bench/eta.py [--root /tmp/rbln-eta] [--jobs 2] [--baseline REF] [--json] [OVERRIDE ...]

Builds the default matrix from scratch (a new build dir: no ``progress-history.json``, no cache) in
a child process whose display also samples ``seconds_left()`` every quarter second and at every
event. When the build is over, each sample's truth is the build's end less the sample's time; the
report is the ratio estimate / truth from the first finished compile on, while at least a tenth of
the build is left (in the last seconds the truth is one compile's remainder: see
tests/test_progress.py), and at the first compile. Within 2x is 0.5 <= ratio <= 2. Over the
whole build it also reports what the display showed: the ratio of each time it showed
(``~12s left``) to the truth, and, where it showed ``finishing`` instead, the longest truth then;
and how long the run took after its last compile (the cells' finalizing, the manifest, the links;
``of_which_after_close_s``: after the display closed, the summary and the table).

``--baseline REF`` (e.g. ``main``) runs the same fresh build with the rbln_build of that git ref
(``git archive`` into the root, first on ``PYTHONPATH``) right after, and reports both side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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

    samples, marks, start = [], {}, time.monotonic()

    class Sampled(LineProgress):
        def sample(self):
            if self.compiles_done:
                shown = [p for p in self.counts() if p.endswith(" left") or p == "finishing"]
                samples.append((time.monotonic() - start, self.seconds_left(), shown[0] if shown else None))
        def compile_finished(self, *a, **k):
            n = super().compile_finished(*a, **k)
            marks["last_compile"] = time.monotonic() - start
            self.sample()
            return n
        def cells_finished(self, done):
            super().cells_finished(done)
            self.sample()
        def close(self):
            marks["closed"] = time.monotonic() - start
            super().close()

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
    json.dump({"end": end, "samples": samples, "marks": marks, "code": code}, open(out_file, "w"))
    """
)


def _seconds(shown: str) -> float:
    """``~1m05s left`` -> 65.0"""
    m = re.fullmatch(r"~(?:(\d+)m)?(\d+)s left", shown)
    assert m is not None, shown
    return 60 * int(m.group(1) or 0) + int(m.group(2))


def measure(root: Path, jobs: int, source: Path | None, overrides: list[str]) -> dict[str, object] | None:
    """One fresh build of the default matrix in ``root``; the estimate's ratios to the truth."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    out = root / "samples.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", CI="1", HOME=str(root / "home"))
    if source is not None:
        env["PYTHONPATH"] = str(source)
    cmd = [sys.executable, "-c", CHILD, str(out), f"build_dir={root / 'build'}", f"jobs={jobs}", *overrides]
    proc = subprocess.run(cmd, cwd=REPO if source is None else source, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not out.is_file():
        print(proc.stderr[-3000:], file=sys.stderr)
        return None
    data = json.loads(out.read_text())
    end, marks = data["end"], data["marks"]
    window = [(t, left) for t, left, _ in data["samples"] if end - t >= max(1.0, end / 10)]
    ratios = [(t, left / (end - t)) for t, left in window if left is not None]
    if not ratios:
        print("no estimate was sampled before the last tenth of the build", file=sys.stderr)
        return None
    # what the display showed, over the whole build: a time (its ratio to the truth) or "finishing"
    shown = [(end - t, _seconds(text)) for t, _, text in data["samples"] if text and text != "finishing"]
    finishing = [end - t for t, _, text in data["samples"] if text == "finishing"]
    shown_ratios = [left / truth for truth, left in shown if truth > 0]
    return {
        "build_s": round(end, 2),
        "samples": len(ratios),
        "samples_without_estimate": len(window) - len(ratios),
        "first_compile_at_s": round(ratios[0][0], 2),
        "ratio_at_first_compile": round(ratios[0][1], 2),
        "ratio_min": round(min(r for _, r in ratios), 2),
        "ratio_max": round(max(r for _, r in ratios), 2),
        "within_2x": all(0.5 <= r <= 2.0 for _, r in ratios),
        "after_last_compile_s": round(end - marks["last_compile"], 2),
        "of_which_after_close_s": round(end - marks["closed"], 2),
        "shown_ratio_min_whole": round(min(shown_ratios), 2) if shown_ratios else None,
        "shown_ratio_max_whole": round(max(shown_ratios), 2) if shown_ratios else None,
        "shown_truth_min_s": round(min(t for t, _ in shown), 2) if shown else None,
        "finishing_samples": len(finishing),
        "finishing_truth_max_s": round(max(finishing), 2) if finishing else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/rbln-eta"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--baseline", metavar="REF", help="also measure rbln_build as of this git ref")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("overrides", nargs="*", help="build overrides (default: the default matrix)")
    args = parser.parse_args()
    results = {"this tree": measure(args.root / "this", args.jobs, None, args.overrides)}
    if args.baseline:
        source = args.root / "baseline-src"
        shutil.rmtree(source, ignore_errors=True)
        source.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", args.baseline], cwd=REPO, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
        results[args.baseline] = measure(args.root / "baseline", args.jobs, source, args.overrides)
    if any(r is None for r in results.values()):
        return 1
    if args.json:
        print(json.dumps({"jobs": args.jobs, **results}, indent=1))
    else:
        names = list(results)
        print(f"{'':28}" + "".join(f"{n:>14}" for n in names))
        for key in next(iter(results.values())) or {}:
            print(f"{key:28}" + "".join(f"{results[n][key]!s:>14}" for n in names))  # type: ignore[index]
    return 0


if __name__ == "__main__":
    sys.exit(main())
