"""A project: the user's directory of configs and recipes, layered over the shipped ones.

    my-release/
      rbln-build.yaml        the marker (and where the project's folders are, if not conf/ recipes/)
      conf/                  Hydra groups: matrix/, model/, device/, and optionally config.yaml
      recipes/<name>/        recipe.yaml + config.json
      build/                 outputs (build_dir is relative to the project root)

The project is found from ``--project DIR``, else ``RBLN_BUILD_PROJECT``, else the current
directory and its parents (the first one holding ``rbln-build.yaml``). Without one, rbln-build uses
the shipped configs alone and paths are relative to the current directory.

Layering: the project's ``conf/`` is Hydra's primary config directory and the shipped ``conf/`` is
appended to the search path (``hydra.searchpath``), so a project file wins and every shipped
device, model and matrix stays available; a project without ``conf/config.yaml`` uses the shipped
root config. Recipes are searched in the project's ``recipes/`` first, then the shipped ones.

``rbln-build.yaml`` keys (all optional)::

    conf: conf          # the project's config folder, relative to the root
    recipes: recipes    # the project's recipes folder, relative to the root
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .._documents import MAX_CONFIG_BYTES, parse_yaml, read_document, yaml_problem
from ..errors import ConfigError
from ..memory import shipped_dir

__all__ = ["Project", "MARKER", "PROJECT_ENV", "SHIPPED_ROOT", "find_project", "split_project_arg", "shipped_project"]

MARKER = "rbln-build.yaml"
PROJECT_ENV = "RBLN_BUILD_PROJECT"
_KEYS = {"conf": "conf", "recipes": "recipes"}
SHIPPED_ROOT = "rbln_build_shipped_config"  # the shipped conf/config.yaml, as a ConfigStore entry
_root_registered = False


def register_shipped_root() -> None:
    global _root_registered
    if _root_registered:
        return
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name=SHIPPED_ROOT, node=OmegaConf.load(shipped_dir("conf") / "config.yaml"))
    _root_registered = True


@dataclass(frozen=True)
class Project:
    """Where configs and recipes are searched, first match wins, and what paths are relative to."""

    root: Path  # build_dir and recipes_dir are relative to it
    conf_dirs: tuple[Path, ...]  # the project's (if it has one), then the shipped conf/
    recipe_dirs: tuple[Path, ...]  # the project's (if it has one), then the shipped recipes/
    marker: Path | None = None  # rbln-build.yaml, or None without a project

    def own_dirs(self) -> tuple[Path, Path]:
        """The project's own (recipes, conf) folders, whether or not they exist yet."""
        keys = _read_marker(self.marker) if self.marker is not None else _KEYS
        return self.root / keys["recipes"], self.root / keys["conf"]

    @property
    def primary_conf(self) -> Path:
        return self.conf_dirs[0]

    @property
    def config_name(self) -> str:
        """The root config Hydra composes: the project's ``conf/config.yaml`` if it has one, else
        the shipped one, registered in Hydra's ConfigStore under ``SHIPPED_ROOT`` (Hydra looks the
        primary config up before it reads ``hydra.searchpath``, so the shipped folder cannot
        supply it from there)."""
        if (self.primary_conf / "config.yaml").is_file():
            return "config"
        register_shipped_root()
        return SHIPPED_ROOT

    def searchpath_override(self) -> str | None:
        """The Hydra override that appends the shipped configs behind the project's, if needed."""
        extra = self.conf_dirs[1:]
        if not extra:
            return None
        return "hydra.searchpath=[" + ",".join(f"file://{p}" for p in extra) + "]"


def shipped_project(cwd: Path | None = None) -> Project:
    """No project: the shipped configs and recipes, paths relative to ``cwd``."""
    return Project(
        root=(Path.cwd() if cwd is None else cwd).resolve(),
        conf_dirs=(shipped_dir("conf"),),
        recipe_dirs=(shipped_dir("recipes"),),
    )


def _read_marker(marker: Path) -> dict[str, str]:
    hint = "fix the project file or remove it"
    data = (
        parse_yaml(
            read_document(marker, limit=MAX_CONFIG_BYTES, error=ConfigError, hint=hint),
            str(marker),
            error=ConfigError,
            hint=hint,
        )
        or {}
    )
    if not isinstance(data, dict):
        raise ConfigError(f"{marker}: expected a mapping with the optional keys conf, recipes; got {data!r}.")
    unknown = set(data) - set(_KEYS)
    if unknown:
        raise ConfigError(f"{marker}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; known: conf, recipes.")
    out = dict(_KEYS)
    for key, value in data.items():
        if not isinstance(value, str) or not value or Path(value).is_absolute():
            raise ConfigError(f"{marker}: {key} must be a folder relative to the project root, got {value!r}.")
        out[key] = value
    return out


MAX_CONFIG_FILES = 10_000  # YAML files in a project's conf/ (a real one has tens)


def check_config_files(conf: Path) -> None:
    """Every YAML file of a project's config folder, checked before Hydra composes any of them: a
    size cap, and no alias bomb or runaway nesting (``_documents.yaml_problem``). Hydra and OmegaConf
    expand aliases without a bound, so a file of nested aliases would hang composition."""
    count = 0
    for folder, _dirs, files in os.walk(conf):
        for file in sorted(files):
            if not file.endswith((".yaml", ".yml")):
                continue
            count += 1
            if count > MAX_CONFIG_FILES:
                raise ConfigError(
                    f"{conf}: over {MAX_CONFIG_FILES:,} YAML files; is conf pointing at the right folder?"
                )
            path = Path(folder) / file
            problem = yaml_problem(read_document(path, limit=MAX_CONFIG_BYTES, error=ConfigError))
            if problem is not None:
                raise ConfigError(f"{path}: {problem}.")


def load_project(root: Path) -> Project:
    try:
        root = root.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python 3.11)
        raise ConfigError(f"--project {root}: cannot be resolved ({exc}); give the project's folder.") from None
    marker = root / MARKER
    if not marker.is_file():
        raise ConfigError(
            f"{root}: not an rbln-build project (no {MARKER}); run `rbln-build init {root}` to make one, "
            "or point --project / RBLN_BUILD_PROJECT at a folder that has one."
        )
    keys = _read_marker(marker)
    shipped_conf, shipped_recipes = shipped_dir("conf").resolve(), shipped_dir("recipes").resolve()
    conf, recipes = (root / keys["conf"]).resolve(), (root / keys["recipes"]).resolve()
    if conf.is_dir() and conf != shipped_conf:
        check_config_files(conf)
    conf_dirs = tuple(dict.fromkeys(p for p in (conf, shipped_conf) if p.is_dir() or p == shipped_conf))
    recipe_dirs = tuple(dict.fromkeys(p for p in (recipes, shipped_recipes) if p.is_dir() or p == shipped_recipes))
    return Project(root=root, conf_dirs=conf_dirs, recipe_dirs=recipe_dirs, marker=marker)


def find_project(explicit: str | None = None, cwd: Path | None = None) -> Project:
    """``explicit`` (``--project``), else ``RBLN_BUILD_PROJECT``, else the nearest ``rbln-build.yaml``
    from ``cwd`` upward, else no project (the shipped configs, relative to ``cwd``)."""
    cwd = (Path.cwd() if cwd is None else cwd).resolve()
    chosen = explicit if explicit is not None else os.environ.get(PROJECT_ENV) or None
    if chosen is not None:
        root = Path(chosen)
        return load_project(root if root.is_absolute() else cwd / root)
    for folder in (cwd, *cwd.parents):
        if (folder / MARKER).is_file():
            return load_project(folder)
    return shipped_project(cwd)


def split_project_arg(argv: list[str]) -> tuple[str | None, list[str]]:
    """Take ``--project DIR`` / ``--project=DIR`` out of ``argv`` (Hydra must not see it)."""
    rest: list[str] = []
    chosen: str | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--project":
            if i + 1 >= len(argv):
                raise ConfigError("--project: expected a folder after it (the project root, holding rbln-build.yaml).")
            chosen = argv[i + 1]
            i += 2
            continue
        if arg.startswith("--project="):
            chosen = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    return chosen, rest
