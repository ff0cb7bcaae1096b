"""``rbln-build``: compose the matrix with Hydra, build it with doit, print the results.

    rbln-build                                   build the default matrix (conf/config.yaml)
    rbln-build matrix=release device=rebel100 budget=0.3
    rbln-build -m matrix=plans budget=0.5,0.9 device=atom_max_x4,rebel100
    rbln-build explain model=qwen3_8b device=rebel100
    rbln-build plan deployment=qwen3_8b_llama3_2_1b      (and serve-command, explain deployment=)
    rbln-build report [build_dir=build] [--open]
    rbln-build --help

Hydra is the composition layer: each Hydra job (one for a run, one per combination for ``-m``)
composes and validates its config and contributes its cells; the union of the jobs' cells is then
built by one doit run under the build directory's lock. A sweep therefore shares one build
directory, one cache and one manifest, and gives exactly the entries of the equivalent matrix.

Exit status: 0 when every cell built or failed as declared in ``matrix.expect_failure``; 1 when a
cell failed otherwise, or the outputs could not be written (then no manifest path is printed); 2 for
a configuration error (one line naming the key or file; nothing is written); 3 for an internal error
(one line naming the file that holds the traceback). No input produces a traceback.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["run", "compose"]


def _compose_jobs(
    project: Any, args: list[str], prog: str = "rbln-build"
) -> tuple[list[Any], list[BaseException], bool]:
    """Compose ``args`` (Hydra overrides and flags) over ``project``'s configs: one BuildSettings
    per Hydra job. The project's conf/ is the primary config folder; the shipped one follows."""
    import contextlib
    import io

    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf.errors import OmegaConfBaseException

    from ..config import register_configs, settings_from_config
    from ..errors import ConfigError, RblnBuildError
    from ..pipeline import sweep_jobs
    from ._compose_once import composed_once
    from ._guard import one_line, usage_error

    register_configs()
    jobs: list[Any] = []
    errors: list[BaseException] = []
    called = [False]

    @hydra.main(version_base="1.3", config_path=str(project.primary_conf), config_name=project.config_name)
    def job(cfg: Any) -> None:
        if sweep_jobs.in_worker():  # a launcher runs this job in its own process: it builds its cells there
            hc = HydraConfig.get()
            try:
                settings = settings_from_config(
                    cfg,
                    dict(hc.runtime.choices),
                    cwd=project.root,
                    conf_dirs=project.conf_dirs,
                    recipe_dirs=project.recipe_dirs,
                )
                error = None
            except RblnBuildError as exc:
                settings, error = None, exc
            sweep_jobs.run_job(hc.job.num, list(hc.overrides.task), settings, error)
            return
        called[0] = True
        try:
            jobs.append(
                settings_from_config(
                    cfg,
                    dict(HydraConfig.get().runtime.choices),
                    cwd=project.root,
                    conf_dirs=project.conf_dirs,
                    recipe_dirs=project.recipe_dirs,
                )
            )
        except RblnBuildError as exc:
            errors.append(exc)
        except OmegaConfBaseException as exc:  # e.g. a missing value or interpolation met while converting
            errors.append(ConfigError(one_line(str(exc))))
        except Exception as exc:  # a bug: reported by main() as one line with a log file
            errors.append(exc)

    searchpath = project.searchpath_override()
    sys.argv = [prog, *args, *([searchpath] if searchpath else [])]
    launch = sweep_jobs.begin()
    captured = io.StringIO()  # Hydra's own error reports span several lines; the user gets one
    try:
        with contextlib.redirect_stderr(captured), composed_once(args):
            job()
    except SystemExit as exc:  # Hydra reported a composition error: a configuration error, exit 2
        if exc.code not in (0, None):
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                sys.stderr.write(captured.getvalue())
            print(f"rbln-build: {usage_error(captured.getvalue()) or one_line(captured.getvalue())}", file=sys.stderr)
            raise SystemExit(2) from None
        sys.stderr.write(captured.getvalue())
        raise
    finally:
        elsewhere = sweep_jobs.finish(launch, project)
    sys.stderr.write(captured.getvalue())  # warnings of a successful composition
    if elsewhere:  # the launcher ran the jobs in other processes; they built, this merges
        return elsewhere, errors, True
    argv = sys.argv[1:]
    if (
        not called[0]
        and {"-m", "--multirun"} & set(argv)
        and not {"-h", "--help", "--hydra-help", "-c", "--cfg", "--info", "-i"} & set(argv)
    ):
        raise sweep_jobs.no_report_error(argv)
    return jobs, errors, called[0]


def _lock(build_dir: Path) -> Any:
    """Create the build directory and hold its lock; a place that cannot be written is a
    configuration error naming build_dir (exit 2)."""
    from ..errors import ConfigError
    from ..store import acquire_build_lock

    try:
        return acquire_build_lock(build_dir)
    except OSError as exc:
        raise ConfigError(
            f"build_dir: cannot create or lock {build_dir} ({exc.strerror or exc}); choose a writable directory."
        ) from None


def _results(entries: list[dict[str, Any]], redone: set[str], build_dir: Path, full: bool) -> str:
    """The full table (up to _table.FULL_TABLE_MAX cells, or ``--full-table``), else a summary that
    names ``results.txt``, which always holds the full table of the run."""
    from ..store import write_atomic
    from ._table import FULL_TABLE_MAX, TABLE_FILE, full_table, summary_table

    table = full_table(entries, redone)
    path: Path | None = build_dir / TABLE_FILE
    try:
        write_atomic(path, (table + "\n").encode("utf-8"))  # type: ignore[arg-type]
    except OSError:
        path = None
    if full or len(entries) <= FULL_TABLE_MAX:
        return table
    return summary_table(entries, redone, None if path is None else str(path))


def _build(jobs: list[Any], sweep: Any, state: dict[str, Any], full_table: bool = False, outputs: Any = None) -> int:
    from ..ci import CiFlags, write_ci_outputs

    outputs = outputs or CiFlags()
    from ..colocation import expand_all
    from ..pipeline import BuildRun

    if any(j.deployment is not None for j in jobs):  # rbln: plan from the compiled reports, in this build
        from ..pipeline import compile_for_planning

        compile_for_planning(jobs)
    build_dir, cells = expand_all(jobs)
    if jobs[0].scale.shard is not None and jobs[0].scale.shard[0] == 0:  # shard=merge/N: metadata, no compile
        from ._shards import merge

        return merge(jobs, build_dir, cells, outputs)
    shard_line = None
    if jobs[0].scale.shard is not None:  # CI without Ray: 1/N of the compile keys (rbln_build.config._shard)
        from ..config import select_shard
        from ..pipeline import scope_inventory_cache

        scope_inventory_cache(build_dir)
        index, count = jobs[0].scale.shard
        cells, total = select_shard(cells, jobs[0].scale.shard)
        mine = len({c.compile_key for c in cells if c.compile_key is not None})
        shard_line = f"shard {index}/{count}: {mine} of {total} compile keys, {len(cells)} cells"
    kept = _declared(jobs, cells)  # a narrowed run keeps the declared matrix's other cells in the manifest
    records = None  # a deployment's record for the manifest (rbln_build.colocation._colocation)
    if any(j.deployment is not None for j in jobs):
        from ..colocation import DeploymentRecords

        records = DeploymentRecords.for_jobs(jobs)
    progress = all(j.progress for j in jobs)
    started = time.perf_counter()
    from ..config import check_contained

    cache_dir = jobs[0].scale.cache_dir
    check_contained(build_dir, None if cache_dir is None else Path(cache_dir))  # before .lock and hydra/
    lock = _lock(build_dir)
    state["build_dir"] = build_dir
    try:
        sweep.publish(build_dir)
        build = BuildRun(build_dir, cells, progress=progress, sections=records, scale=jobs[0].scale, kept=kept)
        code = build.run()
        from ..pipeline import sweep_jobs

        # a launcher's jobs compiled and built in their processes; this run merged: count their work
        own = {c.compile_key for c in cells}  # a shard of a sweep counts its own keys
        build.compiled.extend(k for k in sweep_jobs.reported["compiled"] if k not in build.compiled and k in own)
        build.redone.update(sweep_jobs.reported["redone"])
        summary = build.summary()
        entries = build.entries or []
        table = _results(entries, build.redone, build_dir, full_table)  # results.txt, under the lock
        noop = state.get("noop")
        if noop is not None:  # a no-op's stamp takes the outputs' digest while nothing else can write
            noop.outputs(build_dir, jobs, build, summary, sweep_jobs.reported)
    finally:
        lock.release()
    if not outputs.json:
        print(table)
    from ..pipeline import warning_summary

    for line in warning_summary(entries):  # each distinct cell warning once, with the cells it concerns
        print(line, file=sys.stderr)
    took = time.perf_counter() - started
    counts = (
        f"{summary['cells']} cells: {summary['compiled']} compiled, {summary['finalized']} finalized, "
        f"{summary['skipped']} skipped, {summary['failed']} failed, {summary['expected_failures']} failed as expected "
        f"({took:.1f}s)."
    )
    manifest_path = build_dir / "manifest.json"
    written = write_ci_outputs(outputs, entries, summary, str(manifest_path))
    if build.output_error is not None:
        print(counts)
        if build.manifest_current:  # only links failed: the manifest (and a deployment's record) says so
            for line in records.lines if records is not None else ():
                print(line)
        said = "names those cells as failed" if build.manifest_current else "does not describe this run"
        print(
            f"rbln-build: the build's outputs in {build_dir} could not be written: {build.output_error}. "
            f"The manifest there {said}; fix the cause and run again.",
            file=sys.stderr,
        )
        return 1
    if outputs.json:
        print(
            json.dumps({**summary, "manifest": str(manifest_path), "seconds": round(took, 3)}, indent=2, sort_keys=True)
        )
    else:
        print(f"{counts} Manifest: {manifest_path}")
    if shard_line is not None:
        print(f"{shard_line}; merge them with shard=merge/{jobs[0].scale.shard[1]} and the same cache.remote.")
    nodes = _per_node(build)
    if nodes:
        print(nodes)
    for line in records.lines if records is not None else ():
        print(line)
    for problem in records.problems if records is not None else ():
        print(f"deployment: {problem}", file=sys.stderr)
    if summary["failed"]:
        from ..pipeline import failure_summary

        print("\n".join(failure_summary(entries)), file=sys.stderr)
        names = summary["failed_cells"]
        more = f" ... and {len(names) - 20} more (summary.json lists them all)" if len(names) > 20 else ""
        print(f"{len(names)} failed cell(s): " + ", ".join(names[:20]) + more, file=sys.stderr)
        return 1
    return 1 if code or not written or (records is not None and records.problems) else 0


def _per_node(build: Any) -> str | None:
    """executor=ray: where this run's compiles ran (host: compiles), from the workers' reports."""
    parallel = build.parallel
    if parallel is None or parallel.scale.executor != "ray" or not parallel.compile_results:
        return None
    counts: dict[str, list[int]] = {}
    for done in parallel.compile_results.values():
        host = done.where.rsplit(":", 1)[0] if done.where != "-" else "(lost worker)"
        row = counts.setdefault(host, [0, 0, 0])
        row[0 if done.error is None else 1] += 1
        row[2] += getattr(done, "attempt", 0) > 0
    parts = [
        f"{h} {ok} ok" + (f", {bad} failed" if bad else "") + (f" ({again} after a retry)" if again else "")
        for h, (ok, bad, again) in sorted(counts.items())
    ]
    return f"Ray compiles per node: {'; '.join(parts)}."


def _declared(jobs: list[Any], cells: list[Any]) -> list[Any]:
    """The declared matrix's cells this narrowed run does not build (_matrix.declared_cells). When
    the declared matrix does not expand (another model's recipe is broken), a warning, and none."""
    from ..colocation import declared_cells
    from ..errors import RblnBuildError

    try:
        return declared_cells(jobs, cells)
    except RblnBuildError as exc:
        print(
            f"rbln-build: warning: the declared matrix does not expand ({exc}); the manifest keeps only this "
            "run's cells.",
            file=sys.stderr,
        )
        return []


def compose(args: list[str], prog: str = "rbln-build", state: dict[str, Any] | None = None) -> list[Any] | None:
    """The project (``--project``, RBLN_BUILD_PROJECT or found from the current directory) and the
    composed jobs; None when Hydra only printed something (--help, --cfg). Raises RblnBuildError.
    ``state["project"]``: the project found."""
    from ..config import find_project, split_project_arg

    chosen, rest = split_project_arg(args)
    project = find_project(chosen)
    if state is not None:
        state["project"] = project
    jobs, errors, called = _compose_jobs(project, rest, prog)
    if errors:
        raise errors[0]
    return jobs if called else None


def run(argv: list[str], state: dict[str, Any]) -> int:
    """The build command: compose ``argv`` (Hydra overrides and flags) and build the union of the
    jobs' cells. Raises RblnBuildError for the user's mistakes (the boundary in _main reports them);
    ``state["build_dir"]`` tells the boundary where to log an internal error."""
    from ..noop import Recorder, replay_build
    from ._guard import DeferredSweep

    full_table = "--full-table" in argv  # ours, not Hydra's: the table of every cell, however many
    argv = [a for a in argv if a != "--full-table"]
    from ..ci import CiFlags

    outputs, argv = CiFlags.take(argv)  # ours too: --junit FILE, --json (rbln_build.ci)
    # the short cut replays a no-op's printed answer: machine outputs take the full path, which writes them
    fast = None if outputs.any else replay_build(argv, full_table)
    if fast is not None:
        return fast
    state["noop"] = recorder = Recorder.start(argv, full_table)
    sweep = DeferredSweep(argv)  # a sweep's multirun.yaml waits until every job composed
    code = None
    try:
        jobs = compose(argv, state=state)
        if jobs is None:  # --help, --cfg, --info: Hydra printed what was asked
            return 0
        from ._shards import sharded_sweep, sweeps_shards

        if sweeps_shards(jobs):  # -m shard=1/N,...: each shard in turn, then the merge
            typed = [a for a in argv if a != getattr(sweep, "override", None)]  # not our sweep dir
            code = sharded_sweep(jobs, lambda group: _build(group, sweep, state, full_table, outputs), typed)
        else:
            code = _build(jobs, sweep, state, full_table, outputs)
        return code
    finally:
        sweep.close()
        if recorder is not None:
            recorder.finish(code, state.get("project"))
