"""``rbln-build.json``: rbln-build's own record of a cell artifact, in every cell, whatever the backend.

Only what a loader can load is named like it: an ``rbln`` cell's ``rbln_config.json`` is exactly what
optimum-rbln writes, and CPU programs and plans write no ``rbln_config.json`` at all (vllm-rbln takes
any folder holding one for a compiled model). The same optimum-rbln key names, and what optimum-rbln
0.12 does not record, live here instead::

    {"format": "rbln-build/cell/1",
     "artifact": "program" | "plan" | "rbln",     # what the cell holds
     "npu": "RBLN-CA25",                          # the target NPU (0.12 forgets it at the top level)
     "recipe": ..., "dtype": ..., "cls_name": "RBLN<Architecture>Config",
     "kvcache_num_blocks": N, "batch_size": ..., "max_seq_len": ..., "attn_impl": ...,
     "kvcache_partition_len": ..., "kvcache_block_size": ..., "prefill_chunk_size": ..., "num_devices": ...,
     "programs": {"<file>": "<sha256 hex>", ...},  # every file that is code; {} for a plan
     "quantization": {"weight_bits": 16 | 8 | 4, "format": {...}},  # the cell's; format when quantized
     "tokenizer": null | {"files": [...]},        # the checkpoint's tokenizer files in the cell (memory._companions)
     "generation_config": null | "generation_config.json",
     "data_files": {"<file>": "<sha256 hex>"},    # the tokenizer files, generation config and licence, checked before use
     "license": {"id": ..., "file": ...},         # only for a recipe with a licence (memory._companions)
     "base_model": "Org/Name",                    # only when the recipe's source.model_id is a hub model
     "language": ["en"],                          # only for a recipe that names its weights' languages
     ...backend extras (the torch program's "kv_pool")}

The budget is not here: one artifact serves every budget that resolves to its count (the manifest
records each cell's budget). ``verify_programs`` checks every listed file before anything loads it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from .._documents import absent, parse_json, read_document
from ..errors import BuildError, IntegrityError, UserError

if TYPE_CHECKING:
    from ..memory import CompileSpec

__all__ = [
    "RECORD_FILE",
    "RECORD_FORMAT",
    "ARTIFACT_KINDS",
    "record_for",
    "write_json",
    "write_record",
    "read_record",
    "open_regular",
    "sha256_file",
    "verify_programs",
]

RECORD_FILE = "rbln-build.json"
RECORD_FORMAT = "rbln-build/cell/1"
ARTIFACT_KINDS = ("program", "plan", "rbln")


def write_json(path: Path, value: Any) -> None:
    """Deterministic JSON (sorted keys, fixed indent, trailing newline): artifacts are compared by hash."""
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file; a FIFO, a device (``/dev/zero``) or a
    socket is an OSError, never waited on or read without end (a cell folder is not trusted)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a device, pipe or socket)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open_regular(path) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def record_for(
    spec: CompileSpec,
    num_blocks: int,
    artifact: str,
    programs: dict[str, str],
    directory: Path | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The cell's record: optimum-rbln 0.12.0 key names for the compiled shape, plus the target NPU,
    what the artifact is, the sha256 of every program file, and the companion files (tokenizer,
    generation config) that ``directory``, the cell folder, holds (call after copying them in)."""
    from ..memory import companions_record

    assert artifact in ARTIFACT_KINDS, artifact
    att = spec.attention
    archs = spec.recipe.hf_config.get("architectures") or []
    return {
        "format": RECORD_FORMAT,
        "artifact": artifact,
        "cls_name": f"RBLN{archs[0]}Config" if archs else None,
        "kvcache_num_blocks": num_blocks,
        "batch_size": att.batch_size,
        "max_seq_len": att.max_seq_len,
        "attn_impl": att.attn_impl,
        "kvcache_partition_len": att.kvcache_partition_len,
        "kvcache_block_size": att.kvcache_block_size,
        "prefill_chunk_size": att.prefill_chunk_size,
        "num_devices": spec.num_devices,  # 0.12 name; tensor_parallel_size is its deprecated alias
        "npu": spec.npu.name,
        "dtype": spec.recipe.dtype,
        "recipe": spec.recipe.name,
        "programs": dict(sorted(programs.items())),
        "quantization": {
            "weight_bits": spec.recipe.weight_bits,
            **({} if spec.quantized.is_none else {"format": spec.quantized.to_json()}),  # what the weights are
        },
        **(
            companions_record(directory, spec.recipe.license_id, spec.recipe.license_file)
            if directory is not None
            else {"tokenizer": None, "generation_config": None, "data_files": {}}
        ),
        **({"base_model": spec.recipe.hub_model_id} if spec.recipe.hub_model_id else {}),
        **({"language": list(spec.recipe.language)} if spec.recipe.language else {}),
        **extra,
    }


def write_record(directory: Path, record: dict[str, Any]) -> None:
    write_json(Path(directory) / RECORD_FILE, record)


def read_record(directory: Path) -> dict[str, Any]:
    """The cell's record. A folder without one is not a cell (UserError); a damaged one is a BuildError."""
    path = Path(directory) / RECORD_FILE
    if absent(path, error=UserError, hint="pass a cell folder"):
        raise UserError(
            f"{path}: missing; {directory} is not an rbln-build cell artifact (pass a folder under "
            "<build_dir>/artifacts/)."
        )
    # bounded: a FIFO, /dev/zero or a document nested without end is refused, not read
    value = parse_json(read_document(path, error=BuildError, hint="rebuild the cell"), str(path), error=BuildError)
    if (
        not isinstance(value, dict)
        or value.get("format") != RECORD_FORMAT
        or value.get("artifact") not in ARTIFACT_KINDS
    ):
        raise BuildError(f"{path}: not an rbln-build cell record of format {RECORD_FORMAT!r}; rebuild the cell.")
    programs = value.get("programs")
    if not isinstance(programs, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in programs.items()
    ):
        raise BuildError(f"{path}: 'programs' must map file names to sha256 digests; rebuild the cell.")
    return value


def verify_programs(directory: Path, record: dict[str, Any], keep: bool = False) -> dict[str, bytes]:
    """Check the sha256 of every program file listed in the record, before anything loads it.

    With ``keep`` the verified bytes are returned by file name, so the caller loads exactly what was
    checked (no window between check and load). Raises IntegrityError for a missing file, a name that
    leaves the folder, or a digest mismatch.
    """
    directory = Path(directory)
    verified: dict[str, bytes] = {}
    for name, expected in sorted(record["programs"].items()):
        if Path(name).name != name or name in ("", ".", ".."):
            raise IntegrityError(
                f"{directory / RECORD_FILE}: program name {name!r} is not a file in the cell; "
                "refusing to load it. Rebuild the cell."
            )
        path = directory / name
        try:
            if keep:
                with open_regular(path) as f:
                    data = f.read()
            else:
                data = b""
            actual = hashlib.sha256(data).hexdigest() if keep else sha256_file(path)
        except OSError as exc:
            raise IntegrityError(
                f"{path}: cannot read the program ({exc.strerror or exc}); the artifact is incomplete, rebuild the cell."
            ) from None
        if actual != expected:
            raise IntegrityError(
                f"{path}: sha256 {actual} does not match {expected} recorded in {RECORD_FILE}; the program was "
                "changed after it was built. Refusing to load it: rebuild the cell (rbln-build) or restore it."
            )
        if keep:
            verified[name] = data
    return verified
