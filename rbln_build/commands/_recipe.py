"""``rbln-build recipe add NAME --from CHECKPOINT [--to RECIPES_DIR]``: a recipe for local weights.

Reads the checkpoint (``config.json`` and the safetensors headers; no hub, no torch) and writes

    <project>/recipes/NAME/config.json   the checkpoint's config.json, byte for byte
    <project>/recipes/NAME/recipe.yaml   weights: {path: ...} (relative to the recipe when the
                                         checkpoint is inside the project), dtype from the weights,
                                         build defaults (batch 1, max_seq_len from the config)
    <project>/conf/model/NAME.yaml       recipe: NAME (so ``model=NAME`` and matrix.models work)

The checkpoint must be complete and match its config.json (errors name the file). Nothing existing
is overwritten. Without a project (``rbln-build init``) give ``--to`` for the recipes folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import yaml

from ..errors import ConfigError, RecipeError

__all__ = ["main", "add_recipe"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_MAX_DEFAULT_SEQ = 8192


def add_recipe(
    name: str,
    source: Path,
    recipes_dir: Path,
    conf_dir: Path | None,
    max_seq_len: int | None = None,
    batch_size: int = 1,
) -> list[Path]:
    from ..memory._checkpoint import inspect_checkpoint

    if not _NAME.fullmatch(name):
        raise ConfigError(f"recipe name {name!r}: use letters, digits, '_', '.', '-' (it is a folder name).")
    source = source.resolve()
    config_file = source / "config.json"
    if not config_file.is_file():
        raise RecipeError(
            f"{config_file}: missing; a Hugging Face checkpoint folder has config.json beside its weights."
        )
    config_bytes = config_file.read_bytes()
    try:
        config = json.loads(config_bytes)
    except ValueError as exc:
        raise RecipeError(f"{config_file}: not valid JSON ({exc}).") from None
    checkpoint = inspect_checkpoint(source, config)
    directory = recipes_dir / name
    targets = [directory / "recipe.yaml", directory / "config.json"]
    if conf_dir is not None:
        targets.append(conf_dir / "model" / f"{name}.yaml")
    existing = [str(t) for t in targets if t.exists()]
    if existing:
        raise ConfigError(
            f"{', '.join(existing)} already exist(s); rbln-build never overwrites a recipe. Choose another NAME."
        )
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    seq = max_seq_len or min(int(text.get("max_position_embeddings") or _MAX_DEFAULT_SEQ), _MAX_DEFAULT_SEQ)
    project_root = recipes_dir.resolve().parent
    inside = source.is_relative_to(project_root)  # then the project can move as a whole
    weights_path = os.path.relpath(source, project_root / recipes_dir.name / name) if inside else str(source)
    recipe = {
        "name": name,
        "family": str(text.get("model_type") or config.get("model_type") or ""),
        "source": {"model_id": config.get("_name_or_path") or None, "revision": None},
        "weights": {"path": weights_path},
        "dtype": checkpoint.dtype,
        "quantization": {"weight_bits": 16},
        "build": {"batch_size": batch_size, "max_seq_len": seq},
    }
    header = (
        f"# Written by `rbln-build recipe add {name} --from {source.name}` from the checkpoint's config.json and\n"
        "# safetensors headers. weights.path: the checkpoint (a relative path is relative to this folder). The weights' content is part of the\n"
        "# compile key (a changed file recompiles). build: default options; a model config or the matrix\n"
        "# may override them (attn_impl, kvcache_partition_len, prefill_chunk_size, ...).\n"
    )
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    with open(directory / "config.json", "xb") as f:
        f.write(config_bytes)
    written.append(directory / "config.json")
    with open(directory / "recipe.yaml", "x", encoding="utf-8") as g:
        g.write(header + yaml.safe_dump(recipe, sort_keys=False))
    written.append(directory / "recipe.yaml")
    if conf_dir is not None:
        (conf_dir / "model").mkdir(parents=True, exist_ok=True)
        with open(conf_dir / "model" / f"{name}.yaml", "x", encoding="utf-8") as h:
            h.write(f"# The model config of recipes/{name} (written by `rbln-build recipe add`).\nrecipe: {name}\n")
        written.append(conf_dir / "model" / f"{name}.yaml")
    return written


def main(argv: list[str]) -> int:
    from ..config import find_project, split_project_arg

    chosen, rest = split_project_arg(argv)
    parser = argparse.ArgumentParser(prog="rbln-build recipe", description="Manage recipes of a project.")
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="write a recipe for a local HF checkpoint (no hub access)")
    add.add_argument("name", metavar="NAME", help="the recipe's name (its folder under recipes/)")
    add.add_argument(
        "--from",
        dest="source",
        required=True,
        type=Path,
        metavar="CHECKPOINT",
        help="a local HF checkpoint folder (config.json + *.safetensors)",
    )
    add.add_argument(
        "--to",
        type=Path,
        default=None,
        metavar="RECIPES_DIR",
        help="the recipes folder (default: the project's recipes/)",
    )
    add.add_argument(
        "--max-seq-len", type=int, default=None, help="build default (default: the config's, at most 8192)"
    )
    add.add_argument("--batch-size", type=int, default=1, help="build default (default 1)")
    opts = parser.parse_args(rest)
    project = find_project(chosen)
    if opts.to is not None:
        recipes_dir, conf_dir = opts.to, None
    elif project.marker is not None:
        recipes_dir, conf_dir = project.own_dirs()
    else:
        raise ConfigError(
            "no rbln-build project here (no rbln-build.yaml in this folder or above); run "
            "`rbln-build init` first, or give --to RECIPES_DIR."
        )
    for path in add_recipe(opts.name, opts.source, recipes_dir, conf_dir, opts.max_seq_len, opts.batch_size):
        print(f"created {path}")
    print(f"Build it: rbln-build model={opts.name}   (or add {opts.name} to matrix.models)")
    return 0
