"""What the CLI says about itself: the build's help (this project's config groups, its own then the
shipped ones, and the overrides) and ``rbln-build --version`` (the version, the commit of a git checkout
it runs from, the toolchain).

Written here, not as Hydra's help template, so that a project with its own ``conf/config.yaml``
gets the same help as the shipped configs, listing both its groups and the shipped ones.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

__all__ = ["build_help", "version_text"]

_GROUPS = ("matrix", "model", "device", "deployment", "executor")

OVERRIDES = """\
Overrides (Hydra syntax; a chosen model/device/budget replaces that axis of the matrix):
  matrix=release                          pick a matrix (conf/matrix/<name>.yaml)
  device=atom_max_x4  model=qwen3_8b      narrow to one device / one model
  budget=0.3 | budget=null | budget=50% | budget=10GB | budget=1073741824
                                          narrow to one budget; types are kept: 1 is one byte, 1.0 is 100%
  matrix.budgets=[0.3,0.5,null]           set the budget axis
  matrix.batch_sizes=[1,8]  matrix.max_seq_lens=[8192]
  'matrix.budgets=[null]' 'matrix.kvcache_num_blocks=[0,12]'
                                          explicit block counts (0: all); a count excludes a budget
  matrix.attn_impl=flash_attn  matrix.kvcache_partition_len=8192  matrix.backend=rbln
  matrix.expect_failure=[]                treat every failure as a failure
  'matrix.include=[{models:[qwen3_8b],devices:[rebel100],budgets:[40GB]}]'
                                          more cells after the matrix: sub-matrices with the same keys
                                          (omitted keys from the matrix); narrowing filters them
  build_dir=/path/to/build  recipes_dir=/path/to/recipes  progress=false
  --full-table                            print every cell's row (above 100 cells: a summary, the
                                          full table in build_dir/results.txt)
  --junit FILE  --json                    CI: JUnit XML (a test case per cell); the summary as JSON
                                          (and $GITHUB_STEP_SUMMARY gets Markdown when it is set)
  jobs=4                                  compile in 4 worker processes (default: the cores; 1: in process)
  executor=ray executor.address=auto      compile keys as Ray tasks (pip install 'rbln-build[ray]')
  cache.remote=s3://bucket/prefix         a shared, verified cache behind build_dir/cache (file:// too)
  -m hydra/launcher=joblib ...            sweep jobs in worker processes; one merged manifest
  deployment=NAME                         build a deployment: models sharing one target (conf/deployment/)

Examples:
  rbln-build
  rbln-build matrix=release device=rebel100 budget=0.3
  rbln-build -m matrix=plans budget=0.5,0.9 device=atom_max_x4,rebel100
  rbln-build matrix=plans 'matrix.budgets=[0.5,0.6,0.7]'
  rbln-build --cfg job                    print the composed config and exit

Outputs under build_dir: manifest.json, summary.json, results.txt, artifacts/<cell id>/ (rbln-build.json, ...),
cache/ (content-addressed), .doit.sqlite3 (doit state). `doit list` / `doit info <task>` /
`doit forget <task>` work from the repository root on the same tasks (RBLN_BUILD_OVERRIDES narrows them).
Exit status: 0 all cells built (or failed as declared in matrix.expect_failure), 1 a cell failed,
2 a configuration error (nothing written), 3 a bug in rbln-build. More: docs/building.md."""


def _options(conf_dirs: tuple[Path, ...], group: str) -> list[tuple[str, str]]:
    """(option, where) for each option of ``group``; a project's option shadows a shipped one."""
    seen: dict[str, str] = {}
    for i, d in enumerate(conf_dirs):
        where = "shipped" if i == len(conf_dirs) - 1 else "project"
        try:
            names = sorted(p.stem for p in (d / group).glob("*.yaml"))
        except OSError:
            names = []
        for name in names:
            seen.setdefault(name, where)
    return sorted(seen.items())


def build_help(argv: list[str]) -> str:
    from ..config import find_project, split_project_arg

    chosen, _ = split_project_arg(argv)
    project = find_project(chosen)
    lines = ["Build: rbln-build [--project DIR] [-m] [OVERRIDE ...]", ""]
    where = f"project {project.root}" if project.marker is not None else "the shipped configs"
    lines.append(f"Config groups ({where}; choose one option per group: group=option):")
    many = len(project.conf_dirs) > 1
    for group in _GROUPS:
        opts = _options(project.conf_dirs, group)
        shown = ", ".join(f"{n} (project)" if many and w == "project" else n for n, w in opts)
        lines.append(f"  {group.ljust(11)} {shown or '-'}")
    lines += ["", OVERRIDES]
    return "\n".join(lines)


def version_text() -> str:
    """rbln-build's version and the toolchain it runs with, read from the installed packages'
    metadata (nothing heavy is imported)."""
    from .. import __version__

    parts = []
    for dist in ("torch", "transformers", "optimum-rbln", "hydra-core", "doit"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} not installed")
    commit = _checkout_commit()
    return f"rbln-build {__version__} ({'commit ' + commit + '; ' if commit else ''}{', '.join(parts)})"


def _checkout_commit() -> str | None:
    """The commit of the git checkout rbln-build runs from (``+modified`` when tracked files differ);
    None for an installed wheel: only a work tree whose top holds rbln_build/ and pyproject.toml."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists() or not (root / "pyproject.toml").is_file():
        return None
    from ..release import checkout_commit

    return checkout_commit(root)
