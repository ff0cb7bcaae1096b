"""Check a torch cell's whole ``rbln-build.json`` against its bounds and against its program.

``load_artifact`` sizes the KV pool and checks requests from the record, so a record edited after
the build (a larger ``kvcache_num_blocks``, a dtype name torch does not have, a string where a count
belongs) must not reach ``torch.zeros`` or the program. Before anything is allocated:

* every field has its type and bound (``estimator._limits``): counts are integers (not booleans),
  ``dtype`` and the pool's dtype are one of float32/float16/bfloat16, ``attn_impl`` one of eager/flash_attn,
  names follow the identifier rule;
* the pool agrees with itself: ``kv_pool.num_blocks == kvcache_num_blocks``, ``kv_pool.block_size ==
  kvcache_block_size``, at most the full pool (``max_seq_len // kvcache_block_size * batch_size``);
* the record agrees with the program it names (its graph, already checked as data by ``_graph``):
  two pool inputs per layer, each ``[num_blocks, kv_heads, block_size, head_dim]`` of the pool's
  dtype, ``kvcache_num_blocks`` inside the range the program was exported for, and the batch,
  prompt length and key count (up to ``max_seq_len``: a whole prompt is one call) and block-table
  width inside the program's own dynamic ranges.

The first mismatch raises ``IntegrityError`` (one line naming the file, the key, the value and what
was expected). What this cannot catch -- a record rewritten consistently within the program's ranges
-- is what ``run --manifest`` is for (docs/security.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ...errors import IntegrityError
from ...estimator import LIMITS, name_problem

__all__ = ["check_cell_record", "DTYPES"]

DTYPES = {"float32": 7, "float16": 6, "bfloat16": 13}  # torch dtype name -> torch.export's ScalarType code
ATTN_IMPLS = ("eager", "flash_attn")
_POOL_KEYS = {"num_layers", "kv_heads", "block_size", "head_dim", "dtype", "layer_types", "num_blocks"}
_SYMBOL = re.compile(r"Symbol\('([a-z]{1,4}[0-9]{1,9})'")
_LAYER_TYPE = re.compile(r"[a-z_]{1,64}")


class _Bad(ValueError):
    pass


def _count(record: dict[str, Any], key: str, limit: int, where: str = "") -> int:
    value = record.get(key)
    if type(value) is not int or not 1 <= value <= limit:
        raise _Bad(f"{where}{key} is {value!r}; expected an integer from 1 to {limit:,}")
    return value


def _check_fields(record: dict[str, Any]) -> dict[str, int]:
    counts = {
        key: _count(record, key, LIMITS[key])
        for key in ("kvcache_num_blocks", "batch_size", "max_seq_len", "kvcache_block_size", "prefill_chunk_size")
    }
    counts["num_devices"] = _count(record, "num_devices", LIMITS["num_devices"])
    partition = record.get("kvcache_partition_len")
    if partition is not None:
        _count(record, "kvcache_partition_len", LIMITS["kvcache_partition_len"])
    if record.get("attn_impl") not in ATTN_IMPLS:
        raise _Bad(f"attn_impl is {record.get('attn_impl')!r}; expected one of {', '.join(ATTN_IMPLS)}")
    if record.get("dtype") not in DTYPES:
        raise _Bad(f"dtype is {record.get('dtype')!r}; expected one of {', '.join(DTYPES)}")
    for key in ("recipe", "npu"):
        problem = name_problem(record.get(key))
        if problem is not None:
            raise _Bad(f"{key}: {problem}")
    if record.get("cls_name") is not None and not isinstance(record.get("cls_name"), str):
        raise _Bad(f"cls_name is {record.get('cls_name')!r}; expected a string or null")
    full = counts["max_seq_len"] // counts["kvcache_block_size"] * counts["batch_size"]
    if counts["kvcache_num_blocks"] > full:
        raise _Bad(
            f"kvcache_num_blocks is {counts['kvcache_num_blocks']}, more than the full pool of {full} blocks "
            f"(max_seq_len {counts['max_seq_len']} // kvcache_block_size {counts['kvcache_block_size']} "
            f"* batch_size {counts['batch_size']})"
        )
    pool = record.get("kv_pool")
    if not isinstance(pool, dict) or set(pool) != _POOL_KEYS:
        raise _Bad(f"kv_pool must be an object with exactly the keys {', '.join(sorted(_POOL_KEYS))}")
    counts["num_layers"] = _count(pool, "num_layers", LIMITS["num_hidden_layers"], "kv_pool.")
    counts["kv_heads"] = _count(pool, "kv_heads", LIMITS["num_key_value_heads"], "kv_pool.")
    counts["head_dim"] = _count(pool, "head_dim", LIMITS["head_dim"], "kv_pool.")
    for key, other in (("num_blocks", "kvcache_num_blocks"), ("block_size", "kvcache_block_size")):
        if type(pool.get(key)) is not int or pool[key] != counts[other]:
            raise _Bad(f"kv_pool.{key} is {pool.get(key)!r} but {other} is {counts[other]}; they must be equal")
    if pool.get("dtype") not in DTYPES:
        raise _Bad(f"kv_pool.dtype is {pool.get('dtype')!r}; expected one of {', '.join(DTYPES)}")
    types = pool.get("layer_types")
    if (
        not isinstance(types, list)
        or len(types) != counts["num_layers"]
        or not all(isinstance(t, str) and _LAYER_TYPE.fullmatch(t) for t in types)
    ):
        raise _Bad(f"kv_pool.layer_types must list one layer type name per layer ({counts['num_layers']})")
    return counts


def _dim(meta: dict[str, Any], i: int, ranges: dict[str, Any]) -> tuple[int, int]:
    """The (min, max) a tensor input's dimension ``i`` may take: its value, or its symbol's range."""
    size = meta["sizes"][i]
    if "as_int" in size:
        return int(size["as_int"]), int(size["as_int"])
    match = _SYMBOL.fullmatch(size["as_expr"]["expr_str"].split(",")[0])
    bounds = ranges.get(match.group(1)) if match else None
    if match is None or not isinstance(bounds, dict):
        raise _Bad(f"the program's input dimension {i} is not a plain size symbol")
    low, high = bounds.get("min_val"), bounds.get("max_val")
    return int(low if low is not None else 0), int(high if high is not None else 2**63)


def _check_program(counts: dict[str, int], pool_dtype: str, graph: dict[str, Any]) -> None:
    try:
        module = graph["graph_module"]
        values = module["graph"]["tensor_values"]
        inputs = [
            spec["user_input"]["arg"]["as_tensor"]["name"]
            for spec in module["signature"]["input_specs"]
            if "user_input" in spec
        ]
        ranges = graph.get("range_constraints") or {}
        metas = [values[name] for name in inputs]
    except (KeyError, TypeError) as exc:
        raise _Bad(f"the program's graph does not describe its inputs ({type(exc).__name__}: {exc})") from None
    layers = counts["num_layers"]
    if len(metas) != 4 + 2 * layers:
        raise _Bad(f"kv_pool.num_layers is {layers}, but the program takes {len(metas) - 4} pools, not {2 * layers}")
    try:
        for i, meta in enumerate(metas[4:]):
            shape = [_dim(meta, d, ranges) for d in range(len(meta["sizes"]))]
            want = [(counts["kv_heads"],) * 2, (counts["kvcache_block_size"],) * 2, (counts["head_dim"],) * 2]
            if len(shape) != 4 or shape[1:] != want or meta.get("dtype") != DTYPES[pool_dtype]:
                raise _Bad(
                    f"the program's pool input {i} is {shape} of dtype code {meta.get('dtype')}, not "
                    f"[blocks, {counts['kv_heads']}, {counts['kvcache_block_size']}, {counts['head_dim']}] of "
                    f"{pool_dtype}"
                )
            low, high = shape[0]
            if not low <= counts["kvcache_num_blocks"] <= high:
                raise _Bad(
                    f"kvcache_num_blocks is {counts['kvcache_num_blocks']}, outside the {low}..{high} blocks the "
                    "program was exported for"
                )
        ids, table, keys = metas[0], metas[2], metas[3]
        for what, have, (_low, high) in (
            ("batch_size", counts["batch_size"], _dim(ids, 0, ranges)),
            ("max_seq_len (a whole prompt in one call)", counts["max_seq_len"], _dim(ids, 1, ranges)),
            ("max_seq_len (keys read)", counts["max_seq_len"], _dim(keys, 0, ranges)),
            (
                "max_seq_len // kvcache_block_size",
                counts["max_seq_len"] // counts["kvcache_block_size"],
                _dim(table, 1, ranges),
            ),
        ):
            if have > high:
                raise _Bad(f"{what} is {have}, more than the {high} the program was exported for")
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as exc:
        if isinstance(exc, _Bad):
            raise
        raise _Bad(f"the program's input shapes are unreadable ({type(exc).__name__})") from None


def check_cell_record(record: dict[str, Any], record_file: Path, graph: dict[str, Any]) -> None:
    """Raise IntegrityError unless ``record`` (a torch cell's rbln-build.json) is in bounds and
    agrees with ``graph`` (the program's ``models/<name>.json``, parsed)."""
    try:
        counts = _check_fields(record)
        _check_program(counts, record["kv_pool"]["dtype"], graph)
    except _Bad as exc:
        raise IntegrityError(
            f"{record_file}: {exc}. Refusing to load the cell: it was edited after the build or is damaged; "
            "rebuild it (rbln-build) or restore the file."
        ) from None


def graph_of(data: bytes) -> dict[str, Any]:
    """The parsed graph document of a ``.pt2`` archive already checked by ``check_program_archive``."""
    import io
    import zipfile

    archive = zipfile.ZipFile(io.BytesIO(data))
    models = [i for i in archive.infolist() if i.filename.split("/")[1:2] == ["models"]]
    if len(models) != 1:
        raise IntegrityError(f"the program holds {len(models)} graphs, not one; rebuild the cell.")
    value = json.loads(archive.read(models[0]))
    if not isinstance(value, dict):
        raise IntegrityError("the program's graph is not a JSON object; rebuild the cell.")
    return value
