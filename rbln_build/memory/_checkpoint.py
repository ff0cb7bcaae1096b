"""Local Hugging Face checkpoints: check them cheaply, and digest their weights without re-hashing.

A checkpoint directory holds ``config.json`` and ``*.safetensors`` (one file, or shards listed by
``model.safetensors.index.json``). Everything here reads the standard library only (no torch): a
safetensors file is an 8-byte little-endian header length, a JSON header (tensor name -> dtype,
shape, data offsets), then the data, so a header tells the dtypes and shapes and whether the file
is complete.

``weights_digest`` is the checkpoint's content identity for the compile key: sha256 over each
weight file's name, size and sha256. A file's sha256 is cached under its (size, mtime, ctime,
inode), as the Store's fast path does, so a no-op build never re-reads gigabytes; any change of
stat re-hashes that file (``ctime`` cannot be set from user space).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._documents import parse_json, read_document, sha256_file
from ..errors import RecipeError
from ._quantized import QuantizedLayout, quantized_layout

__all__ = ["Checkpoint", "inspect_checkpoint", "weights_digest", "INDEX_FILE", "DTYPES"]

INDEX_FILE = "model.safetensors.index.json"
DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}  # safetensors dtype -> recipe dtype
_MAX_HEADER = 100 << 20
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class Checkpoint:
    directory: Path
    files: tuple[Path, ...]  # the weight files (and the index, if sharded), sorted
    tensors: dict[str, tuple[str, tuple[int, ...], str]]  # name -> (dtype, shape, file name)
    dtype: str  # the recipe dtype of the floating-point tensors (bfloat16, float16, float32)
    quantized: QuantizedLayout | None = None  # already quantized in optimum-rbln's format (_quantized)


def _header(path: Path) -> dict[str, Any]:
    """A safetensors file's header, checked against the file's size (a truncated copy fails)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise RecipeError(f"{path}: {size} bytes, too short for a safetensors file; the copy is partial.")
            (n,) = struct.unpack("<Q", raw)
            if n > _MAX_HEADER or 8 + n > size:
                raise RecipeError(
                    f"{path}: header of {n} bytes does not fit in the {size}-byte file; "
                    "the file is partial or not safetensors."
                )
            header = json.loads(f.read(n))
    except OSError as exc:
        raise RecipeError(f"{path}: cannot read it ({exc.strerror}).") from None
    except ValueError as exc:
        raise RecipeError(f"{path}: the safetensors header is not valid JSON ({exc}).") from None
    except RecursionError:
        raise RecipeError(f"{path}: the safetensors header is nested too deeply to be one; not safetensors.") from None
    if not isinstance(header, dict):
        raise RecipeError(f"{path}: the safetensors header is not a mapping.")
    end = _check_offsets(path, header)
    if 8 + n + end != size:
        raise RecipeError(
            f"{path}: the header describes {8 + n + end} bytes but the file has {size}; "
            "the file is partial (an interrupted copy?) or damaged. Copy it again."
        )
    return header


_ITEM_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I8": 1, "F8_E4M3": 1}  # DTYPES, and _quantized's


def _check_offsets(path: Path, header: dict[str, Any]) -> int:
    """The end of the data the header describes, once every tensor's ``data_offsets`` are as the
    safetensors format demands (what its loader refuses, refused here with the file named): two
    non-negative integers, the tensors' ranges contiguous from 0 without overlap or hole, and each
    range exactly its shape times its dtype's size."""
    spans: list[tuple[int, int, str]] = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        shape = info.get("shape") if isinstance(info, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
            or offsets[0] > offsets[1]
        ):
            raise RecipeError(
                f"{path}: tensor {str(name)[:80]!r} has data_offsets {str(offsets)[:80]}; expected [begin, end] with "
                "0 <= begin <= end. The file is damaged or not safetensors."
            )
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise RecipeError(
                f"{path}: tensor {str(name)[:80]!r} has shape {str(shape)[:80]}; expected a list of sizes."
            )
        item = _ITEM_BYTES.get(str(info.get("dtype")))
        if item is not None:
            want = item
            for d in shape:
                want *= d
            if offsets[1] - offsets[0] != want:
                raise RecipeError(
                    f"{path}: tensor {str(name)[:80]!r} spans {offsets[1] - offsets[0]} bytes but its shape {shape} "
                    f"of {info.get('dtype')} needs {want}. The file is damaged."
                )
        spans.append((offsets[0], offsets[1], str(name)))
    spans.sort()
    end = 0
    for begin, stop, name in spans:
        if begin != end:
            what = "overlaps the previous tensor" if begin < end else f"leaves a hole of {begin - end} bytes before it"
            raise RecipeError(
                f"{path}: tensor {name[:80]!r} at data_offsets [{begin}, {stop}] {what}. The file is damaged."
            )
        end = stop
    return end


def _weight_files(directory: Path) -> list[Path]:
    index = directory / INDEX_FILE
    if index.is_file():
        try:
            weight_map = parse_json(read_document(index, error=RecipeError), str(index), error=RecipeError)[
                "weight_map"
            ]
            if not all(isinstance(v, str) for v in weight_map.values()):
                raise ValueError("a 'weight_map' value is not a file name")
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RecipeError(f"{index}: not a valid safetensors index ({exc}); it needs a 'weight_map'.") from None
        for name in names:
            if "/" in name or "\\" in name or not (directory / name).is_file():
                raise RecipeError(
                    f"{directory / name}: listed in {index.name} but missing; the checkpoint is incomplete."
                )
        return [directory / n for n in names]
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise RecipeError(
            f"{directory}: no *.safetensors files (and no {INDEX_FILE}); point weights.path at a "
            "local HF checkpoint saved with safetensors."
        )
    return files


def inspect_checkpoint(directory: Path, config: dict[str, Any] | None = None) -> Checkpoint:
    """Check a checkpoint's files (present, complete) and, given ``config``, that its embedding and
    layer count match it. Errors name the file."""
    directory = Path(directory)
    if not directory.is_dir():
        raise RecipeError(f"{directory}: not a directory; point weights.path at a local HF checkpoint.")
    files = _weight_files(directory)
    tensors: dict[str, tuple[str, tuple[int, ...], str]] = {}
    for path in files:
        for name, info in _header(path).items():
            if name != "__metadata__":
                tensors[name] = (str(info.get("dtype")), tuple(info.get("shape") or ()), path.name)
    index = directory / INDEX_FILE
    if index.is_file():
        weight_map = json.loads(index.read_bytes())["weight_map"]
        for name, file in sorted(weight_map.items()):
            if name not in tensors or tensors[name][2] != file:
                raise RecipeError(f"{directory / file}: {INDEX_FILE} says it holds {name!r}, but it does not.")
    layout = quantized_layout(directory, tensors)  # integer weights and scales: checked there, as a whole
    plain = [t for n, t in tensors.items() if layout is None or n not in layout.quantized_tensors]
    floats = sorted({DTYPES[d] for d, _s, _f in plain if d in DTYPES})
    others = sorted({d for d, _s, _f in plain if d not in DTYPES})
    if len(floats) != 1 or others:
        raise RecipeError(
            f"{directory}: weights in {', '.join(floats + others) or 'no dtype'}; rbln-build reads "
            "checkpoints in one of bfloat16, float16 or float32 (the linear layers may be quantized in "
            "optimum-rbln's format: int8 or float8_e4m3fn weights with scales)."
        )
    if config is not None:
        _check_against(directory, tensors, config)
    extra = [index] if index.is_file() else []
    return Checkpoint(directory, tuple(sorted(files + extra)), tensors, floats[0], layout)


def _check_against(
    directory: Path, tensors: dict[str, tuple[str, tuple[int, ...], str]], config: dict[str, Any]
) -> None:
    c: dict[str, Any] = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    embed = [n for n in tensors if n.endswith("embed_tokens.weight")]
    if not embed:
        raise RecipeError(f"{directory}: no '*embed_tokens.weight' tensor in the checkpoint; is it a decoder-only LM?")
    _dtype, shape, file = tensors[embed[0]]
    want = (c.get("vocab_size"), c.get("hidden_size"))
    if shape != want:
        raise RecipeError(
            f"{directory / file}: {embed[0]} has shape {list(shape)} but config.json says "
            f"vocab_size x hidden_size = {list(want)}; the weights and config.json do not belong together."
        )
    layers = {m.group(1) for m in map(_LAYER.search, tensors) if m is not None}
    if layers and len(layers) != c.get("num_hidden_layers"):
        raise RecipeError(
            f"{directory}: the checkpoint has {len(layers)} layers but config.json says "
            f"num_hidden_layers = {c.get('num_hidden_layers')}; the weights and config.json do not belong together."
        )


_memory_cache: dict[str, dict[str, Any]] = {}


def weights_digest(checkpoint: Checkpoint, cache_dir: Path | None = None) -> str:
    """sha256 over the weight files (name, size, sha256 each); per-file digests are reused while
    the file's (size, mtime, ctime, inode) is unchanged. ``cache_dir`` keeps them across runs."""
    real = str(checkpoint.directory.resolve())
    cache_file = None if cache_dir is None else Path(cache_dir) / (hashlib.sha256(real.encode()).hexdigest() + ".json")
    cached: dict[str, Any] = dict(_memory_cache.get(real, {}))
    if cache_file is not None and not cached:
        try:
            loaded = json.loads(cache_file.read_bytes())
            cached = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            cached = {}  # no cache yet, or a damaged one: re-hash (the cache is only a shortcut)
    fresh: dict[str, Any] = {}
    h = hashlib.sha256(b"rbln-build checkpoint weights v1\0")
    for path in checkpoint.files:
        st = path.stat()
        stat = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        hit = cached.get(path.name)
        sha = hit[1] if isinstance(hit, list) and len(hit) == 2 and hit[0] == stat else sha256_file(path)
        fresh[path.name] = [stat, sha]
        h.update(f"{path.name}\0{st.st_size}\0{sha}\0".encode())
    _memory_cache[real] = fresh
    if cache_file is not None and fresh != cached:
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_name(f".tmp-{cache_file.name}-{os.getpid()}")
            tmp.write_text(json.dumps(fresh, sort_keys=True), encoding="utf-8")
            os.replace(tmp, cache_file)
        except OSError:
            pass  # an unwritable cache only costs a re-hash next time
    return "sha256:" + h.hexdigest()
