"""Sweeps at scale: a 10,008-cell and a 1,008-cell plans matrix, against ``import hydra, doit``.

    python bench/sweep.py [--root build/sweep-bench] [--repeat 3] [--sizes k10,k1] [--json OUT]

The matrices (plans only: the 6 shipped published models, no torch export):

* ``k10``: 6 models x 3 devices (atom_max, atom_max_x4, rebel100) x 556 budgets = 10,008 cells,
  18 compile keys;
* ``k1``:  the same models and devices x 56 budgets = 1,008 cells, the same 18 compile keys.

They are declared in a project the bench writes (``<root>/project``: ``rbln-build.yaml`` and
``conf/matrix/sweep_k10.yaml``, ``sweep_k1.yaml``), so Hydra reads one YAML list instead of parsing
a 556-element override. Budgets are fractions from 0.1 up, so the small ones fail on the small
devices (``matrix.expect_failure`` is empty: those cells are failures, as they should be, and the
build exits 1). The parameter inventory cache is shared by every build (``RBLN_BUILD_CACHE``), so
a fresh build measures the build, not the first inventory of a recipe.

For each matrix, side by side in one run (each measured ``--repeat`` times, the minimum kept):

* fresh build (the build dir moved aside first, and deleted only after everything is timed: see
  ``Bench.set_aside``; ``--fresh-repeat`` times, default 1);
* no-op rebuild (checked: nothing compiled, nothing redone), each repeat twice: the full path (the
  no-op stamps in ``<build_dir>/.noop`` removed first: Hydra composes, doit checks every task, the
  manifest is rendered; it records a new stamp) and then the short cut (``rbln_build.noop``: the
  stamp holds, so the no-op's answer is printed again; checked: summary.json not rewritten);
* ``rbln-build status`` (checked: exit 0, everything up to date), with the build's stamp (the
  short cut) and without it (the full path);
* ``rbln-build report`` (when matplotlib is installed): once with no figures drawn yet, then
  ``--repeat`` times reusing them (``report/.figures``) on the full path (its stamp removed) and
  through the short cut (checked: the page not rewritten);

plus the no-op of the 18-cell default matrix (built once into ``<root>/default``), and
``python -c "import hydra, doit"`` measured ``--repeat`` times before every group. Every figure is
a ratio to the minimum of all those import runs. The machine's cores may be shared with other work:
the minimum of the repeats is the figure least disturbed by it, and each run's CPU time (user +
system, from the kernel's accounting of the child) is reported beside its wall time, also as a
ratio to the import's: it moves far less with the load than the wall time does. The no-op's cost per cell is fitted
from the two matrices (the slope between 1,008 and 10,008 cells), for each path.

The package's bytecode is compiled first (``compileall``, untimed), as pip does when it installs a
wheel: the baseline imports hydra and doit from their compiled bytecode too, and under
``PYTHONDONTWRITEBYTECODE=1`` every process would otherwise compile rbln_build's modules again.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MODELS = ["qwen3_8b", "qwen3_0_6b", "llama3_1_8b", "llama3_2_1b", "mistral_7b_v0_1", "gemma3_1b"]
DEVICES = ["atom_max", "atom_max_x4", "rebel100"]
SIZES = {"k10": 556, "k1": 56}  # budgets per (model, device)


def budgets(n: int) -> list[float]:
    step = 0.889 / (n - 1)
    values = [round(0.1 + i * step, 4) for i in range(n)]
    assert len(set(values)) == n
    return values


def write_project(root: Path) -> Path:
    """A project holding the two sweep matrices (everything else is the shipped conf/)."""
    project = root / "project"
    (project / "conf" / "matrix").mkdir(parents=True, exist_ok=True)
    (project / "rbln-build.yaml").write_text("conf: conf\n")
    for name, n in SIZES.items():
        body = {
            "models": MODELS,
            "devices": DEVICES,
            "budgets": budgets(n),
            "expect_failure": [],
        }
        text = "# written by bench/sweep.py\n" + "".join(f"{k}: {json.dumps(v)}\n" for k, v in body.items())
        (project / "conf" / "matrix" / f"sweep_{name}.yaml").write_text(text)
    return project


CPU: list[float] = []  # the CPU seconds (user + system) of each timed() child, in order


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    cpu = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    took = time.perf_counter() - started
    CPU.append(_children_cpu() - cpu)
    return took, proc


class Bench:
    def __init__(self, root: Path, repeat: int) -> None:
        self.root = root
        self.repeat = repeat
        self.env = dict(os.environ, RBLN_BUILD_CACHE=str(root / "inventory"), HF_HUB_OFFLINE="1")
        self.imports: list[float] = []
        self.import_cpu: list[float] = []
        self.rows: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}
        self.notes: dict[str, Any] = {}

    def cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "rbln_build.cli", *args]

    def baseline(self) -> None:
        for _ in range(self.repeat):
            self.imports.append(timed([sys.executable, "-c", "import hydra, doit"], self.env)[0])
            self.import_cpu.append(CPU[-1])

    def record(self, label: str, took: float) -> None:
        self.rows.setdefault(label, []).append(took)
        self.cpu.setdefault(label, []).append(CPU[-1])
        print(f"  {label}: {took:.2f}s (cpu {CPU[-1]:.2f}s)", file=sys.stderr, flush=True)

    def build_args(self, name: str, project: Path | None) -> list[str]:
        build = self.root / name
        extra = ["--project", str(project), f"matrix=sweep_{name}"] if project is not None else []
        return [*extra, "progress=false", f"build_dir={build}"]

    def check_noop(self, name: str) -> None:
        summary = json.loads((self.root / name / "summary.json").read_text())
        if summary["compiled"] or summary["redone_cells"]:
            sys.exit(
                f"{name}: the no-op rebuild redid work: compiled {summary['compiled']}, "
                f"redone {len(summary['redone_cells'])}"
            )

    def fresh(self, name: str, project: Path | None, times: int) -> None:
        for _ in range(times):
            self.set_aside(self.root / name)
            took, proc = timed(self.cli(*self.build_args(name, project)), self.env)
            if not (self.root / name / "manifest.json").is_file():
                sys.exit(f"building {name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            self.record(f"{name} fresh build", took)
            self.notes[f"{name} build stdout lines"] = proc.stdout.count("\n")
            summary = json.loads((self.root / name / "summary.json").read_text())
            self.notes[f"{name} cells"] = summary["cells"]
            self.notes[f"{name} compiled"] = summary["compiled"]

    def set_aside(self, path: Path) -> None:
        """Move an old build dir out of the way (deleted at the end, ``remove_set_aside``): a fresh
        build right after deleting tens of thousands of files pays ext4's inode allocator, which steps
        over every recently deleted inode (``recently_deleted`` in a kernel profile: 5-7 s of system
        time for the 10,008-cell build, against 1.3 s), a cost of the deletion, not of the build."""
        if path.exists():
            aside = self.root / ".set-aside"
            aside.mkdir(exist_ok=True)
            path.rename(aside / f"{path.name}-{len(list(aside.iterdir()))}")

    def remove_set_aside(self) -> None:
        shutil.rmtree(self.root / ".set-aside", ignore_errors=True)

    def forget(self, name: str, prefix: str = "") -> None:
        """Remove the no-op stamps (rbln_build.noop) so the next run takes the full path."""
        for path in (self.root / name / ".noop").glob(f"{prefix}*"):
            path.unlink()

    def noop(self, name: str, project: Path | None, label: str | None = None) -> None:
        """Each repeat: the full path (no stamp: it checks everything and records the stamp), then the
        short cut (the stamp holds), each checked to be what it says by what it wrote."""
        label = label or f"{name} no-op"
        summary = self.root / name / "summary.json"
        for _ in range(self.repeat):
            self.forget(name)
            before = summary.stat().st_mtime_ns
            took, _ = timed(self.cli(*self.build_args(name, project)), self.env)
            self.check_noop(name)
            if summary.stat().st_mtime_ns == before or not list((self.root / name / ".noop").glob("*.json")):
                sys.exit(f"{name}: the full no-op did not write summary.json or did not record its stamp")
            self.record(f"{label}, full path", took)
            before = summary.stat().st_mtime_ns
            took, _ = timed(self.cli(*self.build_args(name, project)), self.env)
            if summary.stat().st_mtime_ns != before:
                sys.exit(f"{name}: the no-op after a no-op did not take the short cut")
            self.record(f"{label}, short cut", took)

    def status(self, name: str, project: Path | None) -> None:
        """Each repeat: with the build's stamp (short cut), then without it (full path)."""
        for shortcut in (True, False):
            if not shortcut:
                self.forget(name)
            for _ in range(self.repeat):
                took, proc = timed(self.cli("status", *self.build_args(name, project)), self.env)
                if proc.returncode != 0:
                    sys.exit(f"{name}: status says the build is not up to date:\n{proc.stdout[-2000:]}\n{proc.stderr}")
                self.record(f"{name} status, {'short cut' if shortcut else 'full path'}", took)
        timed(self.cli(*self.build_args(name, project)), self.env)  # the build's stamp again

    def report(self, name: str) -> None:
        shutil.rmtree(self.root / name / "report", ignore_errors=True)  # the first report draws every figure
        self.forget(name, "report-")
        took, proc = timed(self.cli("report", f"build_dir={self.root / name}"), self.env)
        if proc.returncode != 0:
            sys.exit(f"{name}: report failed:\n{proc.stderr[-2000:]}")
        self.record(f"{name} report, drawing the figures", took)
        time.sleep(2.1)  # the next report reads the figures just drawn: too fresh for a stamp (RACY_NS)
        page = self.root / name / "report" / "index.html"
        for _ in range(self.repeat):
            for shortcut in (False, True):
                if not shortcut:
                    self.forget(name, "report-")
                before = page.stat().st_mtime_ns
                took, proc = timed(self.cli("report", f"build_dir={self.root / name}"), self.env)
                if proc.returncode != 0:
                    sys.exit(f"{name}: report failed:\n{proc.stderr[-2000:]}")
                if (page.stat().st_mtime_ns == before) != shortcut:
                    sys.exit(f"{name}: report {'wrote' if shortcut else 'did not write'} its page")
                self.record(f"{name} report, {'short cut' if shortcut else 'full path, figures reused'}", took)

    def disk(self, name: str) -> None:
        cache = self.root / name / "cache"
        files = size = 0
        for dirpath, _, names in os.walk(cache):
            for n in names:
                files += 1
                size += os.lstat(os.path.join(dirpath, n)).st_size
        self.notes[f"{name} cache files"] = files
        self.notes[f"{name} cache bytes"] = size


def has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=REPO / "build" / "sweep-bench")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fresh-repeat", type=int, default=1)
    parser.add_argument("--sizes", default="k10,k1", help="which matrices: k10, k1 (comma-separated)")
    parser.add_argument("--no-default", action="store_true", help="skip the 18-cell default matrix")
    parser.add_argument("--no-report", action="store_true", help="skip rbln-build report")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    opts = parser.parse_args()
    root = opts.root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    project = write_project(root)
    bench = Bench(root, opts.repeat)
    # The package's bytecode, compiled once and untimed, as pip compiles it when it installs a wheel:
    # `import hydra, doit` reads the bytecode pip wrote, and a checkout run with PYTHONDONTWRITEBYTECODE=1
    # would otherwise compile every rbln_build module from source in every process the build starts.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "rbln_build")], check=True)
    if not (root / "inventory").is_dir():  # the parameter inventories, once, untimed
        print("warming the inventory cache", file=sys.stderr)
        timed(bench.cli(*bench.build_args("k1", project)), bench.env)
    report = not opts.no_report and has_matplotlib()
    if not opts.no_default:
        print("default matrix", file=sys.stderr)
        if not (root / "default" / "manifest.json").is_file():
            bench.fresh("default", None, 1)
        timed(bench.cli(*bench.build_args("default", None)), bench.env)  # up to date with this code
        bench.baseline()
        bench.noop("default", None, "default no-op (18 cells)")
    for name in [s for s in opts.sizes.split(",") if s]:
        print(f"{name} matrix", file=sys.stderr)
        bench.baseline()
        bench.fresh(name, project, opts.fresh_repeat)
        bench.disk(name)
        bench.baseline()
        bench.noop(name, project)
        bench.baseline()
        bench.status(name, project)
        if report:
            bench.baseline()
            bench.report(name)
    bench.remove_set_aside()  # the old build dirs, deleted after everything is timed
    base, base_cpu = min(bench.imports), min(bench.import_cpu)
    rows = [
        {
            "what": 'python -c "import hydra, doit"',
            "min_s": round(base, 3),
            "n": len(bench.imports),
            "x_import": 1.0,
            "cpu_s": round(base_cpu, 3),
            "cpu_x_import": 1.0,
        }
    ]
    for label, times in bench.rows.items():
        cpu = min(bench.cpu[label])
        rows.append(
            {
                "what": label,
                "min_s": round(min(times), 3),
                "n": len(times),
                "x_import": round(min(times) / base, 2),
                "cpu_s": round(cpu, 3),
                "cpu_x_import": round(cpu / base_cpu, 2),
            }
        )
    fit = {}
    for path in ("short cut", "full path"):
        k10, k1 = f"k10 no-op, {path}", f"k1 no-op, {path}"
        if k10 in bench.rows and k1 in bench.rows:
            for what, table in (("wall", bench.rows), ("cpu", bench.cpu)):
                slope = (min(table[k10]) - min(table[k1])) / (10008 - 1008)
                fit[f"no-op ({path}) cost per cell, {what} (us)"] = round(slope * 1e6, 1)
                fit[f"no-op ({path}) fixed cost, {what} (s)"] = round(min(table[k1]) - slope * 1008, 3)
    out = {
        "repeat": opts.repeat,
        "rows": rows,
        "fit": fit,
        "notes": bench.notes,
        "all_s": bench.rows,
        "import_s": bench.imports,
    }
    width = max(len(r["what"]) for r in rows)
    print(f"{'what'.ljust(width)}  wall min  x import   cpu min  x import  (n: runs, the minimum kept)")
    for r in rows:
        print(
            f"{r['what'].ljust(width)}  {r['min_s']:7.2f}s  {r['x_import']:8.2f}  {r['cpu_s']:7.2f}s  "
            f"{r['cpu_x_import']:8.2f}  (n={r['n']})"
        )
    for k, v in {**fit, **bench.notes}.items():
        print(f"{k}: {v}")
    if opts.json:
        opts.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
