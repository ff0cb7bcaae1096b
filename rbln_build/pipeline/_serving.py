"""Serving hand-off: the vllm-rbln flags that agree with a built cell, and serve commands.

What vllm-rbln 0.12.0 does with a model (read in its ``utils/optimum/converter/`` and ``platform/``;
nothing of it is imported here):

* It serves one model per process. A directory that holds ``rbln_config.json`` is a compiled model
  (``is_compiled_dir``). Its ``rbln_config.json`` then decides: ``max_num_seqs`` becomes its
  ``batch_size``, ``max_model_len`` its ``max_seq_len``, the KV block size its
  ``kvcache_block_size`` (or ``kvcache_partition_len``), the pool its ``kvcache_num_blocks``, and
  dtype and device count likewise, whatever the flags said; a ``--max-num-batched-tokens`` other
  than its ``prefill_chunk_size`` is an error.
* Any other model is compiled through optimum-rbln when the server starts, from the flags:
  ``batch_size = --max-num-seqs``, ``max_seq_len = --max-model-len``, ``kvcache_partition_len =
  --block-size`` (flash attention when it differs from the length), ``prefill_chunk_size =
  --max-num-batched-tokens``, ``num_devices = --rbln-num-devices-per-local-rank`` and
  ``memory_budget = --gpu-memory-utilization`` (a fraction). That budget always goes in, so an
  explicit ``kvcache_num_blocks`` cannot (optimum-rbln takes one or the other).
* An omitted ``--gpu-memory-utilization`` is 0.93 (``RBLN_DEFAULT_GPU_MEMORY_UTILIZATION``), and a
  value equal to upstream vLLM's default, 0.92, is raised to 0.93 too
  (``RblnPlatform.apply_config_platform_defaults``): so a record always carries the fraction, and never
  exactly 0.92 (``serve_fraction``).
* A compiled model's device count is what its ``rbln_config.json`` records
  (``_resolve_num_devices``: a top-level ``num_devices``, else the first ``_compile_cfgs`` entry's,
  else 1), whatever ``--rbln-num-devices-per-local-rank`` says, and every ``optimum_overrides`` key but
  ``device`` is dropped. optimum-rbln 0.12.0 records it in ``_compile_cfgs`` only (the rbln backend
  keeps it there when it resizes a cell: ``backends._rbln``); ``compiled_num_devices`` reads it the same
  way, and ``serve-command`` refuses a cell whose file would be served on another count.
* Its devices are the ones ``RBLN_VISIBLE_DEVICES`` lists, and a runtime's device ids count within
  them; ``tensor_parallel_size`` must stay 1 on this path. Co-located models are separate
  processes pinned to the same devices, each on its own port.

Only a real ``rbln`` cell is a compiled model for vllm-rbln (its artifact holds ``rbln_config.json``).
A ``torch`` program runs on CPU only and a plan holds no program: for those the record says how to
have vllm-rbln compile the same configuration at start-up (from the recipe's source model), with the
cell's budget as the fraction, which the estimator resolves to the same count from the same report.
A recipe without a hub model id (a local checkpoint) has nothing vllm-rbln could compile at start-up,
and neither has a synthetic one (seeded weights: ``rbln-build/tiny-llama`` names no hub model,
``Recipe.hub_model_id``): their torch and plan cells are refused (``refused``: the reason), never ``vllm serve
None`` or a made-up id.

A quantized cell's record carries ``quantization`` (its format, ``exact`` and ``reason``). An rbln cell is
served from its own compiled, quantized weights; a torch or plan cell of a variant is never exact: what
vllm-rbln compiles at start-up is the hub model's float weights (``reason`` says so).

``--tokenizer`` is the cell itself when it carries the checkpoint's tokenizer files (rbln-build.json
``"tokenizer"``), else the source model's hub id; a cell with neither is refused with the reason.
"""

from __future__ import annotations

import json
import math
import shlex
from typing import Any

from ..config import Cell
from ..errors import UserError
from ..estimator import fraction_for_bytes
from ..store import CellResult

__all__ = [
    "ENGINE",
    "serving_for",
    "with_budget",
    "command_for",
    "check_serving",
    "serve_fraction",
    "FLAG_ORDER",
]

ENGINE = "vllm-rbln==0.12.0"
DEVICE_ENV = "RBLN_VISIBLE_DEVICES"
CELL_PREFIX = "artifacts/"  # a serving record's path into the cell, relative to the build directory
FLAG_ORDER = (
    "max_num_seqs",
    "max_model_len",
    "block_size",
    "max_num_batched_tokens",
    "dtype",
    "rbln_num_devices_per_local_rank",
    "gpu_memory_utilization",
)


# vllm-rbln 0.12.0 takes a --gpu-memory-utilization equal to upstream vLLM's default (CacheConfig's
# 0.92) for "left alone" and raises it to its own default, 0.93 (platform/__init__.py).
UPSTREAM_DEFAULT_FRACTION = 0.92


def serve_fraction(nbytes: int, npu: Any) -> float | None:
    """The ``--gpu-memory-utilization`` for a budget of ``nbytes`` per device: the smallest float that
    resolves to at least ``nbytes`` (``fraction_for_bytes``), except exactly 0.92, which vllm-rbln would
    serve as 0.93: the next float up instead (whether it still resolves to the cell's count is the
    caller's ``exact`` check). None when no fraction gives ``nbytes``."""
    fraction = fraction_for_bytes(nbytes, npu.available_bytes)
    if fraction == UPSTREAM_DEFAULT_FRACTION:
        fraction = math.nextafter(fraction, 1.0)
    return fraction


def serving_for(cell: Cell, result: CellResult | None) -> dict[str, Any] | None:
    """The serving record of a built cell (None when the cell did not build)."""
    if result is None or not result.ok or cell.spec is None:
        return None
    att = cell.spec.attention
    precompiled = result.produced == "rbln"  # an optimum-rbln compiled model (the rbln backend's cells)
    flags: dict[str, Any] = {
        "max_num_seqs": att.batch_size,
        "max_model_len": att.max_seq_len,
        "block_size": att.kvcache_block_size,
        "max_num_batched_tokens": att.prefill_chunk_size,
        "dtype": cell.recipe.dtype,
        "rbln_num_devices_per_local_rank": cell.device.num_devices,
    }
    notes: list[str] = []
    exact = True
    refused: str | None = None
    model_id = cell.recipe.hub_model_id
    no_hub = (
        f"{cell.recipe.name} is a synthetic recipe (seeded weights): its source.model_id "
        f"{cell.recipe.source.get('model_id')!r} names no hub model"
        if cell.recipe.seed is not None
        else f"recipe {cell.recipe.name} has no hub model id (source.model_id: null, as for a local checkpoint)"
    )
    model: str | None
    if precompiled:
        model = f"{CELL_PREFIX}{cell.id}"
    else:
        model = model_id
        what = "a torch program (CPU only)" if result.produced == "program" else "a plan (no program)"
        if model is None:
            refused = (
                f"cell {cell.id} is {what}, and {no_hub}: vllm-rbln has no model to compile at start-up; build the "
                "recipe with matrix.backend=rbln and serve that cell (a compiled model), or set source.model_id in "
                "its recipe"
            )
        else:
            notes.append(f"the artifact is {what}: vllm-rbln compiles this configuration from {model} at start-up")
        budget = result.budget_bytes
        fraction = None if budget is None else serve_fraction(budget, cell.npu)
        if cell.kvcache_num_blocks == 0 and budget is not None and fraction is not None:
            flags["gpu_memory_utilization"] = fraction
            chiplets = cell.npu.num_chiplets
            exact = int(cell.npu.available_bytes * fraction) // chiplets == budget // chiplets
        elif cell.kvcache_num_blocks:
            exact = False
            notes.append(
                f"an explicit kvcache_num_blocks ({cell.kvcache_num_blocks}) cannot be passed: vllm-rbln 0.12.0 always "
                "compiles with memory_budget = --gpu-memory-utilization; serve an rbln-backend artifact for this count"
            )
        else:
            exact = False
            notes.append(f"no memory_budget fraction of {cell.npu.name} gives this cell's {budget} bytes per device")
    variant = _variant(cell, precompiled, model_id)
    if variant is not None and not variant["exact"]:
        exact = False
        notes.append(str(variant["reason"]))
    # The tokenizer: the cell's own (the checkpoint's files it carries), else the source model's.
    tokenizer = f"{CELL_PREFIX}{cell.id}" if cell.recipe.tokenizer_files else model_id
    if tokenizer is None and refused is None:
        refused = (
            f"cell {cell.id} carries no tokenizer (recipe {cell.recipe.name} names none), and {no_hub} to take one "
            "from; add the checkpoint's tokenizer files to the recipe (tokenizer: {files: [...]}, as `rbln-build "
            "recipe add` does) and rebuild, or set source.model_id"
        )
    elif precompiled and not cell.recipe.tokenizer_files:
        notes.append(f"the cell carries no tokenizer: vllm-rbln takes {tokenizer}'s")
    return {
        "engine": ENGINE,
        "model": model,
        "precompiled": precompiled,
        "tokenizer": tokenizer,  # "artifacts/<cell id>" (the cell's own files), a hub id, or None (refused)
        "kvcache_num_blocks": result.kvcache_num_blocks,
        "exact": exact and refused is None,  # the flags reproduce the cell's block count
        "refused": refused,  # why no command can serve this cell, or None
        "flags": flags,
        "notes": notes,
        **({} if variant is None else {"quantization": variant}),
    }


def _variant(cell: Cell, precompiled: bool, model_id: str | None) -> dict[str, Any] | None:
    """A quantized cell's format, and whether the command serves its quantized weights (None: float).
    A compiled rbln cell is served from its own quantized weights; anything vllm-rbln compiles at
    start-up comes from the hub model's float weights, so it is never this cell's variant."""
    assert cell.spec is not None
    q = cell.spec.quantized
    if q.is_none:
        return None
    reason = None
    if not precompiled:
        reason = (
            f"variant {q.name} ({q.weights} weights): vllm-rbln would compile {model_id or 'the hub model'}'s float "
            "weights at start-up, not this cell's quantized ones (another model, another block count); serve an "
            "rbln-backend cell of this variant, a compiled model of its quantized checkpoint"
        )
    return {**q.to_json(), "exact": reason is None, "reason": reason}


def check_serving(serving: Any, where: str) -> dict[str, Any]:
    """A serving record read from a manifest or a release (documents anyone may have edited), held to
    the shape ``serving_for`` writes before a command is made from it: strings where paths and notes
    go, scalars as flags, a device count within the limits (it sizes the device list). Anything else
    is a UserError naming ``where`` and what it holds."""
    from ..estimator import count_problem

    def bad(what: str) -> UserError:
        return UserError(f"{where}: its serving record {what}; rebuild the cell (rbln-build) or release it again.")

    if not isinstance(serving, dict):
        raise bad(f"is a {type(serving).__name__}, not an object")
    refused = serving.get("refused")
    if refused is not None and not isinstance(refused, str):
        raise bad(f"has 'refused' {refused!r}, not a string")
    for key in ("model", "tokenizer"):
        value = serving.get(key)
        if value is not None and not isinstance(value, str):
            raise bad(f"has {key!r} {str(value)[:80]!r}, not a string")
    if serving.get("model") is None and not refused:
        raise bad("names no model")
    for key in ("exact", "precompiled"):
        if not isinstance(serving.get(key), bool):
            raise bad(f"has {key!r} {str(serving.get(key))[:80]!r}, not true or false")
    blocks = serving.get("kvcache_num_blocks")
    if not isinstance(blocks, int) or isinstance(blocks, bool) or blocks < 0:
        raise bad(f"has 'kvcache_num_blocks' {str(blocks)[:80]!r}, not a non-negative integer")
    notes = serving.get("notes")
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise bad("has 'notes' that are not a list of strings")
    flags = serving.get("flags")
    if not isinstance(flags, dict) or not all(
        isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in flags.values()
    ):
        raise bad("has 'flags' that are not an object of numbers and strings")
    devices = flags.get("rbln_num_devices_per_local_rank", 1)
    problem = count_problem("num_devices", devices if isinstance(devices, int) else str(devices)[:80])
    if problem is not None:
        raise bad(f"has rbln_num_devices_per_local_rank: {problem}")
    return serving


def with_budget(serving: dict[str, Any], budget: int | None, npu: Any) -> dict[str, Any]:
    """A serving record of a cell built with an explicit count, completed with the budget that
    reproduces that count (``budget``: the smallest that resolves to it, from the built report; None
    when no budget resolves to exactly it). vllm-rbln 0.12.0 compiles at start-up with
    ``memory_budget = --gpu-memory-utilization``, so this fraction is what pins the count there."""
    if serving["precompiled"] or "gpu_memory_utilization" in serving["flags"]:
        return serving
    count = serving["kvcache_num_blocks"]
    notes = [n for n in serving["notes"] if "cannot be passed" not in n]
    fraction = None if budget is None else serve_fraction(budget, npu)
    if budget is None or fraction is None:
        notes.append(
            f"no memory_budget resolves to exactly {count} blocks (a budget that holds them holds one more): "
            "serve an rbln-backend artifact for this count"
        )
        return {**serving, "exact": False, "notes": notes}
    chiplets = npu.num_chiplets
    exact = int(npu.available_bytes * fraction) // chiplets == budget // chiplets and not serving.get("refused")
    exact = exact and (serving.get("quantization") or {}).get("exact") is not False  # never the float command
    notes.append(
        f"the explicit count {count} is what memory_budget {budget} bytes per device resolves to (the smallest "
        "such budget, from the built report): --gpu-memory-utilization passes it"
    )
    return {
        **serving,
        "flags": {**serving["flags"], "gpu_memory_utilization": fraction},
        "exact": exact,
        "notes": notes,
    }


def command_for(
    serving: dict[str, Any],
    port: int,
    device_ids: tuple[int, ...],
    build_dir: str,
    cell_dir: str | None = None,
) -> dict[str, Any]:
    """One ``vllm serve`` command: the environment that pins the devices, and the argument list.

    A path into the cell (``artifacts/<cell id>``: a compiled model, the cell's tokenizer) is
    ``cell_dir`` when given (a built or released cell folder), else under ``build_dir``. The runtime's
    device override names the first ``len(device_ids)`` visible devices (all of them: the process sees
    only those). A record that says ``refused`` raises UserError with its reason."""
    if serving.get("refused"):
        raise UserError(f"no serve command: {serving['refused']}.")

    def place(path: str) -> str:
        if not path.startswith(CELL_PREFIX):
            return path  # a hub model id
        return cell_dir if cell_dir is not None else f"{build_dir.rstrip('/')}/{path}"

    model = serving["model"]
    tokenizer = serving.get("tokenizer")
    argv = ["vllm", "serve", place(str(model)), "--port", str(port)]
    if tokenizer is not None and (tokenizer != model or str(tokenizer).startswith(CELL_PREFIX)):
        argv += ["--tokenizer", place(str(tokenizer))]  # a hub model's own tokenizer is vllm's default
    flags = serving["flags"]
    for name in FLAG_ORDER:
        if name in flags:
            argv += ["--" + name.replace("_", "-"), str(flags[name])]
    devices: Any = 0 if len(device_ids) == 1 else list(range(len(device_ids)))
    argv += ["--additional-config", json.dumps({"optimum_overrides": {"device": devices}}, sort_keys=True)]
    # The optimum path, pinned: under VLLM_RBLN_USE_VLLM_MODEL=1 (or `--model-impl auto` for a model
    # optimum-rbln does not run) vllm-rbln sizes the KV cache itself at start-up from
    # gpu_memory_utilization x total - used, ignoring the planned count (docs/colocation.md, section 6).
    env = {"VLLM_RBLN_USE_VLLM_MODEL": "0", DEVICE_ENV: ",".join(str(i) for i in device_ids)}
    line = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *(shlex.quote(a) for a in argv)])
    return {"env": env, "argv": argv, "shell": line}
