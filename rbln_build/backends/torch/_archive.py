"""Refuse a ``.pt2`` program that could run Python code while torch loads it.

``torch.export.load`` in torch 2.13 has no safe mode: it unpickles, with ``weights_only=False``,
weights and constants saved "with pickle" (tensor subclasses), ``custom_obj_*`` and ``opaque_obj_*``
constants, legacy ``data/weights/<model>.pt`` files, and sample inputs that ``weights_only=True``
cannot read (it falls back to full pickle); it also loads AOTInductor shared libraries from
``data/aotinductor/``. Our programs contain none of these: plain tensors stored raw, no sample inputs.

So before a program is handed to torch, its archive is checked against an allowlist of the entries
``torch.export.save`` writes for such a program (this module needs no torch: zipfile and json):

    <root>/archive_format, archive_version, byteorder, .data/version, .data/serialization_id
    <root>/models/<name>.json                                   the graph (JSON, not pickle)
    <root>/data/weights/<name>_weights_config.json, weight_<n>   raw tensor bytes, use_pickle false
    <root>/data/constants/<name>_constants_config.json, tensor_<n>
    <root>/data/sample_inputs/<name>.pt                         must be empty (0 bytes)

Any other entry, a duplicated name, a config entry with ``use_pickle`` true or a payload name
outside ``weight_<n>`` / ``tensor_<n>``, or non-empty sample inputs is refused with
``IntegrityError`` before anything is unpickled. Then every JSON document (the graphs and the
configs) is checked for strings torch would evaluate as Python (``_graph``: symbolic expressions,
guards, node targets).
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

from ...errors import IntegrityError
from ._graph import check_graph_json

__all__ = ["check_program_archive"]

_NAME = r"[A-Za-z0-9_]+"
_FIXED = {"archive_format", "archive_version", "byteorder", ".data/version", ".data/serialization_id"}
_MODEL = re.compile(rf"models/({_NAME})\.json")
_WEIGHTS_CONFIG = re.compile(rf"data/weights/({_NAME})_weights_config\.json")
_CONSTANTS_CONFIG = re.compile(rf"data/constants/({_NAME})_constants_config\.json")
_WEIGHT = re.compile(r"data/weights/weight_\d+")
_CONSTANT = re.compile(r"data/constants/tensor_\d+")
_SAMPLE_INPUTS = re.compile(rf"data/sample_inputs/({_NAME})\.pt")
MAX_JSON_BYTES = 256 << 20  # one graph or config document, uncompressed
_PAYLOAD = {"weights": re.compile(r"weight_\d+"), "constants": re.compile(r"tensor_\d+")}


def _refuse(where: Path, what: str) -> IntegrityError:
    return IntegrityError(
        f"{where}: {what}; torch.export.load would unpickle or load code from it. Refusing to load the "
        "program (rbln-build never writes such content): rebuild the cell from a trusted build."
    )


def check_program_archive(data: bytes, where: Path) -> None:
    """Raise IntegrityError unless ``data`` (a ``.pt2`` archive) holds only allowlisted entries."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise IntegrityError(f"{where}: not a .pt2 archive ({exc}); rebuild the cell.") from None
    names = [i.filename for i in infos]
    if len(set(names)) != len(names):
        raise _refuse(where, "the archive names one entry twice")
    roots = {n.split("/", 1)[0] for n in names}
    if len(roots) != 1 or any("/" not in n for n in names):
        raise _refuse(where, f"entries outside one archive folder ({sorted(roots)[:3]})")
    root = roots.pop()
    configs: list[tuple[str, str]] = []
    documents: list[tuple[zipfile.ZipInfo, bool]] = []
    for info in infos:
        rel = info.filename[len(root) + 1 :]
        if rel.endswith("/") and info.file_size == 0:
            continue  # a folder entry
        if _MODEL.fullmatch(rel):
            documents.append((info, True))
            continue
        if rel in _FIXED or _WEIGHT.fullmatch(rel) or _CONSTANT.fullmatch(rel):
            continue
        if _WEIGHTS_CONFIG.fullmatch(rel):
            configs.append(("weights", info.filename))
            documents.append((info, False))
        elif _CONSTANTS_CONFIG.fullmatch(rel):
            configs.append(("constants", info.filename))
            documents.append((info, False))
        elif _SAMPLE_INPUTS.fullmatch(rel):
            if info.file_size != 0:
                raise _refuse(where, f"{rel!r} holds pickled sample inputs ({info.file_size} bytes)")
        else:
            raise _refuse(where, f"unexpected archive entry {rel!r}")
    for info, _ in documents:
        if info.file_size > MAX_JSON_BYTES:
            raise _refuse(where, f"{info.filename!r} is {info.file_size:,} bytes (at most {MAX_JSON_BYTES:,})")
    for kind, name in configs:
        try:
            config = json.loads(archive.read(name))["config"]
            entries = list(config.items())
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError, zipfile.BadZipFile) as exc:
            raise _refuse(where, f"unreadable {name!r} ({exc})") from None
        for fqn, meta in entries:
            if not isinstance(meta, dict) or meta.get("use_pickle") is not False:
                raise _refuse(where, f"{kind} entry {fqn!r} is stored with pickle")
            if not isinstance(meta.get("path_name"), str) or not _PAYLOAD[kind].fullmatch(meta["path_name"]):
                raise _refuse(where, f"{kind} entry {fqn!r} points at {meta.get('path_name')!r}, not a raw tensor")
    for info, is_model in documents:
        try:
            with archive.open(info) as f:
                data = f.read(MAX_JSON_BYTES + 1)
        except (zipfile.BadZipFile, ValueError, OSError, NotImplementedError) as exc:
            raise _refuse(where, f"unreadable {info.filename!r} ({exc})") from None
        if len(data) > MAX_JSON_BYTES:
            raise _refuse(where, f"{info.filename!r} is larger than {MAX_JSON_BYTES:,} bytes")
        check_graph_json(data, info.filename, where, is_model=is_model)
