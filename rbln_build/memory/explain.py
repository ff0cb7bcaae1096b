"""``rbln-build explain``: what one model occupies on one device target, and what budgets give.

    rbln-build explain model=qwen3_8b device=rebel100
    rbln-build explain model=qwen3_8b device=atom_max_x4 budgets=0.3,0.5,1.0 --json
    rbln-build explain model=qwen3_8b device=rebel100 --plot qwen3_8b.rebel100.png

Prints, from the memory model (``rbln_build.memory``) and the estimator: weights, workspace and
runtime buffers per chiplet, KV bytes per block, the full pool and the floor, the budget needed
for each, and the resolved block count at a few budgets. These are model-based estimates (no
compiler runs); docs/memory-model.md says how the model was calibrated.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from ..errors import BuildError, EstimateError, RblnBuildError, UserError
from ..estimator import WORDS_SYNOPSIS, align_2mib, budget_from_text
from ._recipes import DEFAULT_RECIPES_DIR, Recipe, list_recipes, load_recipe
from ._render import render

__all__ = ["main", "explain", "explain_with_report", "render", "load_device", "DEFAULT_DEVICE_DIR", "DEFAULT_BUDGETS"]

DEFAULT_DEVICE_DIR = Path(__file__).resolve().parents[2] / "conf" / "device"
DEFAULT_BUDGETS: tuple[object, ...] = (0.1, 0.2, 0.3, 0.5, 1.0)
_BUILD_KEYS = ("batch_size", "max_seq_len", "kvcache_partition_len", "attn_impl", "prefill_chunk_size")
_INT_KEYS = {"batch_size", "max_seq_len", "kvcache_partition_len", "prefill_chunk_size"}
_KEYS = {"model", "device", "budgets", *_BUILD_KEYS}

USAGE = """\
usage: rbln-build explain model=<recipe> device=<device> [key=value ...] [--json] [--plot FILE.png]

Explain the memory plan of one model on one device target: weights, workspace and runtime
buffers per chiplet, KV-cache bytes per block, the full pool and the floor, the budget each
needs, and the kvcache_num_blocks the estimator resolves at a few memory budgets.

required:
  model=NAME                 a model config under conf/model/, as in a build ({models});
                             its build options apply, then the options below
  device=NAME                a device target under conf/device/ ({devices})

options (defaults: the recipe's build section, then optimum-rbln's defaults for the NPU):
  batch_size=N  max_seq_len=N  kvcache_partition_len=N  prefill_chunk_size=N
  attn_impl=eager|flash_attn
  budgets=B,B,...            memory budgets to resolve (default {budgets}); each is
                             {budget_forms}
  --json                     one deterministic JSON object instead of the table
  --plot FILE                also draw the blocks-vs-budget curve and the per-chiplet DRAM stacks
                             into FILE (.png or .svg; byte-identical from run to run); needs
                             matplotlib: pip install 'rbln-build[report]'
  -h, --help                 this text

The numbers come from rbln-build's NPU memory model, not from the Rebellions compiler: they are
estimates calibrated to the specification's published figures (see docs/memory-model.md).
Exit status: 0 on success, 2 for a usage or input error.
"""


class _UsageError(UserError):
    pass


def _usage() -> str:
    def names(directory: Path, pattern: str) -> str:
        try:
            return ", ".join(
                sorted(
                    p.stem if pattern else p.name
                    for p in directory.glob(pattern or "*")
                    if pattern or (p / "recipe.yaml").is_file()
                )
            )
        except OSError:
            return "none found"

    return USAGE.format(
        models=names(DEFAULT_RECIPES_DIR, ""),
        devices=names(DEFAULT_DEVICE_DIR, "*.yaml"),
        budgets=",".join(str(b) for b in DEFAULT_BUDGETS),
        budget_forms=WORDS_SYNOPSIS,
    )


def load_device(name: str, directory: Path = DEFAULT_DEVICE_DIR) -> tuple[str, int]:
    """conf/device/<name>.yaml → (npu, num_devices)."""
    path = directory / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in directory.glob("*.yaml"))) or "none"
        raise _UsageError(f"explain: unknown device '{name}' ({path} does not exist). Known devices: {known}.")
    data = yaml.safe_load(path.read_text()) or {}
    npu, num_devices = data.get("npu"), data.get("num_devices", 1)
    if not isinstance(npu, str) or isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
        raise _UsageError(f"{path}: expected 'npu: <name>' and 'num_devices: <positive int>', got {data!r}.")
    return npu, num_devices


def _parse_budget(text: str) -> object:
    try:
        return budget_from_text(text)
    except EstimateError as error:
        raise _UsageError(f"explain: budgets=: {error}") from None


def _parse(argv: list[str]) -> tuple[dict[str, str], bool, Path | None]:
    opts: dict[str, str] = {}
    as_json = False
    plot: Path | None = None
    args = iter(argv)
    for arg in args:
        if arg == "--json":
            as_json = True
        elif arg == "--plot" or arg.startswith("--plot="):
            value = arg.partition("=")[2] if "=" in arg else next(args, "")
            if not value:
                raise _UsageError("explain: --plot needs a file name, e.g. --plot qwen3_8b.png.")
            plot = Path(value)
        elif "=" in arg and not arg.startswith("-"):
            key, _, value = arg.partition("=")
            if key not in _KEYS:
                raise _UsageError(f"explain: unknown option '{key}'; known: {', '.join(sorted(_KEYS))}.")
            opts[key] = value
        else:
            raise _UsageError(f"explain: cannot read argument {arg!r}; options are key=value (see --help).")
    for key in ("model", "device"):
        if key not in opts:
            raise _UsageError(f"explain: missing {key}=...; see rbln-build explain --help.")
    return opts, as_json, plot


def explain(
    model: str,
    device: str,
    budgets: tuple[object, ...] = DEFAULT_BUDGETS,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The explanation as a plain JSON value (what ``--json`` prints)."""
    return explain_with_report(model, device, budgets, overrides)[0]


# (model name, device name) -> (recipe, NPU name, number of devices, the model config's build options)
Resolver = Callable[[str, str], "tuple[Recipe, str, int, dict[str, Any]]"]


def _by_name(model: str, device: str) -> tuple[Recipe, str, int, dict[str, Any]]:
    """Without configs: ``model`` is a recipe name and ``device`` a shipped conf/device file."""
    if model not in list_recipes():
        raise _UsageError(f"explain: unknown model '{model}'. Known models: {', '.join(list_recipes())}.")
    npu_name, num_devices = load_device(device)
    return load_recipe(model), npu_name, num_devices, {}


def explain_with_report(
    model: str,
    device: str,
    budgets: tuple[object, ...] = DEFAULT_BUDGETS,
    overrides: dict[str, Any] | None = None,
    resolve: Resolver | None = None,
) -> tuple[dict[str, Any], Any]:
    """``explain``'s value and the AllocationReport it was computed from (for ``--plot``).

    ``resolve`` turns the names into a recipe and a device. The CLI passes the build's own config
    loader (``model=`` is a conf/model file whose build options apply, as in a build; ``device=`` is
    checked against the device schema; a project's configs come first)."""
    from ..estimator import Request, estimate, resolve_npu
    from ._model import ACTIVATION_LIVE_SETS, build_report
    from ._spec import CompileSpec

    recipe, npu_name, num_devices, model_options = (resolve or _by_name)(model, device)
    npu = resolve_npu(npu_name)
    opts = {k: recipe.build.get(k) for k in _BUILD_KEYS}
    opts.update({k: v for k, v in model_options.items() if k in _BUILD_KEYS and v is not None})
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    opts.update(given)
    if opts["batch_size"] is None or opts["max_seq_len"] is None:
        raise _UsageError(f"explain: recipe '{model}' has no build.batch_size/max_seq_len; pass them as options.")
    said: list[str] = []  # why an option given is not used as the defaults would have it
    if given.get("attn_impl") == "eager":
        # The defaults' partition (and block) length are flash attention's: kept, they would switch the
        # attention asked for back to flash_attn. A partition length given with it is the user's own.
        for key in ("kvcache_partition_len", "kvcache_block_size"):
            default = opts.get(key, recipe.build.get(key))
            if key not in given and default is not None:
                opts[key] = None
                said.append(
                    f"attn_impl=eager: the default {key}={default} (the model's build options) is for "
                    "flash_attn and is not used."
                )
        kept = {k: v for k, v in recipe.build.items() if k not in ("kvcache_partition_len", "kvcache_block_size")}
        recipe = replace(recipe, build={**kept, **{k: v for k, v in recipe.build.items() if k in given}})
    try:
        spec = CompileSpec.for_recipe(recipe, npu, num_devices, **opts)
    except EstimateError as error:
        asked = ", ".join(f"{k}={v}" for k, v in sorted(given.items()))
        raise _UsageError(
            f"explain: {model} on {device} cannot use these attention options ({asked or 'the defaults'}): {error}"
        ) from None
    attention = spec.attention
    report = build_report(spec)

    def request(budget: object) -> Request:
        return Request.for_attention(npu.name, num_devices, attention, memory_budget=budget)

    base = estimate(request(None), report)
    bd = base.breakdown
    if bd is None:  # the request itself was rejected
        raise _UsageError(f"explain: {base.error}")

    nodes = []
    for node in range(num_devices):
        chiplets = []
        for c in range(npu.num_chiplets):
            entry: dict[str, int] = {}
            for graph in report.alloc.values():
                for key, grid in graph.items():
                    entry[key] = entry.get(key, 0) + grid[node][c]
            entry["non_kv"] = bd.non_kv_bytes[node][c]
            entry["kv_per_block"] = sum(
                align_2mib(t.sizes[node][c]) for t in report.kv_tensors.values() if t.can_resize
            )
            entry["kv_fixed"] = bd.kv_fixed_bytes[node][c]
            chiplets.append(dict(sorted(entry.items())))
        nodes.append(chiplets)

    rows = []
    for budget in budgets:
        res = estimate(request(budget), report)
        b = res.breakdown
        rows.append(
            {
                "budget": budget,
                "budget_bytes": None if b is None else b.budget_bytes,
                "kvcache_num_blocks": res.kvcache_num_blocks,
                "max_fitting_blocks": None if b is None else b.max_fitting_blocks,
                "error": res.error,
                "error_kind": res.error_kind,
            }
        )

    notes = report.notes
    return {
        "model": model,
        "source": recipe.source.get("model_id"),
        "device": device,
        "npu": npu.name,
        "product": npu.product,
        "num_devices": num_devices,
        "num_chiplets": npu.num_chiplets,
        "available_bytes_per_device": npu.available_bytes,
        "dtype": recipe.dtype,
        "weight_bits": recipe.weight_bits,
        "attention": attention.to_json(),
        "parameters": notes.get("parameters"),
        "host_embedding_bytes": notes.get("host_embedding_bytes"),
        "layers_per_chiplet": notes.get("layers_per_chiplet"),
        "activation_live_sets": ACTIVATION_LIVE_SETS,
        "per_chiplet": nodes,
        "num_full_blocks": base.num_full_blocks,
        "num_min_blocks": base.num_min_blocks,
        "budget_for_floor": bd.budget_for_floor.to_json(),
        "budget_for_full_pool": bd.budget_for_full_pool.to_json(),
        "budgets": rows,
        "warnings": list(dict.fromkeys([*said, *attention.warnings, *base.warnings])),
        "estimate": "model-based (rbln_build.memory), calibrated to the specification's figures; not a compiler report",
    }, report


PlotFn = Callable[[dict[str, Any], Any, Path], None]


def main(argv: list[str], plot_with: PlotFn | None = None, resolve: Resolver | None = None) -> int:
    """Entry point of ``rbln-build explain ARGS`` (``argv`` excludes the ``explain`` word).

    ``plot_with(data, report, path)`` draws ``--plot FILE``; the caller passes it (the CLI passes
    ``rbln_build.reporting.plot_explanation``), since drawing lives in a layer above this one."""
    if any(a in ("-h", "--help", "help") for a in argv):
        sys.stdout.write(_usage())
        return 0
    try:
        opts, as_json, plot = _parse(argv)
        overrides: dict[str, Any] = {}
        for key in _BUILD_KEYS:
            if key in opts:
                if key in _INT_KEYS:
                    try:
                        overrides[key] = int(opts[key])
                    except ValueError:
                        raise _UsageError(f"explain: {key}={opts[key]!r} is not an integer.") from None
                else:
                    overrides[key] = opts[key]
        budgets = DEFAULT_BUDGETS
        if "budgets" in opts:
            budgets = tuple(_parse_budget(b) for b in opts["budgets"].split(","))
        data, report = explain_with_report(opts["model"], opts["device"], budgets, overrides, resolve)
        if plot is not None:
            if plot_with is None:
                raise _UsageError("explain: --plot is not available from this entry point; use rbln-build explain.")
            plot_with(data, report, plot)
    except UserError as error:  # one line, whatever a value or a config's text held
        sys.stderr.write(" ".join(str(error).split()) + "\n")
        return 2
    except (BuildError, RblnBuildError) as error:
        sys.stderr.write(" ".join(str(error).split()) + "\n")
        return 1
    if as_json:
        sys.stdout.write(json.dumps(data, sort_keys=True, indent=2) + "\n")
    else:
        sys.stdout.write(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
