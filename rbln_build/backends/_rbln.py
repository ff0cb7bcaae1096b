"""The ``rbln`` backend: the real Rebellions compiler through optimum-rbln 0.12.0.

Needs ``rebel`` (rebel-compiler, from Rebellions' SDK) and ``optimum.rbln`` (optimum-rbln 0.12.0;
``INSTALL_HINT`` says how). Without them, constructing the backend raises ``BackendUnavailable``.

compile (once per compile key): ``RBLNAutoModelForCausalLM.from_pretrained(folder, export=True,
rbln_config={...}, dtype=<recipe dtype>)`` with the resolved attention options, ``num_devices``, the
target ``npu`` and ``kvcache_num_blocks`` unset, saved into the baseline (``model_save_dir``). The folder holds the
recipe's ``config.json`` (what the compile key was built from) and the weights: a local checkpoint's
``*.safetensors`` (linked, never its own config.json), or seeded weights saved once. optimum-rbln
then does what it always does: flash attention compiles each full-attention cache with one block
(``is_auto``) and grows it to the count that fits 100% of the target NPU; eager attention compiles
the full pool, fixed. When not even the floor fits, optimum-rbln raises "Insufficient memory for the
required KV cache ..." during the compile; that becomes ``InputFailure(kind="insufficient_memory")``
with the same message (the estimator's wording and numbers), stored by the build and not retried.

The AllocationReport is read back from the compiled models, as optimum-rbln's estimator reads them:
``get_alloc_per_chiplet_by_key()`` of every graph (without ``DramTensor``), ``exp_get_dram_tensor_sizes()``
of ``prefill``, each cache's ``can_resize`` from ``cache_metas``, and ``current_blocks`` = the compiled
``kvcache_num_blocks``.

finalize (once per cell), as optimum-rbln's ``--set-kvcache-num-blocks`` does, with its checks made
errors: the compiled ``*.rbln`` files are verified against their sha256 (recorded at compile), the
count must be at least ``num_min_blocks``, and a baseline with no resizable cache (eager, or
``is_auto`` false) can only give the count it was compiled with: any other count is an
``InputFailure`` (``kv_cache_not_resizable``), never a cell whose buffers disagree with its config.
Resizable buffers are rescaled with ``exp_rescale_buffer_size({name: (target, current)})``, the
models saved, and ``rbln_config.json`` written by optimum-rbln's own config class (so it holds
exactly what optimum-rbln writes), except one thing its CLI loses: the compile's target NPU and
device count, which optimum-rbln records only in ``_compile_cfgs`` and which its config class reads
back as null, stay as compiled (vllm-rbln 0.12.0 serves a compiled model on the count that file gives,
else on 1 device). rbln-build's record (target NPU, programs' sha256, ``"artifact": "rbln"``) goes
to ``rbln-build.json``.

A checkpoint's tokenizer and ``generation_config.json`` (the recipe's companion files,
``memory._companions``) are linked into the folder optimum-rbln compiles from, so its model and its
preprocessor step see the real ones; after the compile, whatever tokenizer or processor files that step
wrote are replaced by the recipe's own, byte for byte, at the top of the compiled folder (where
optimum-rbln saves them), and the recipe's generation config replaces the one optimum-rbln re-serialized
(a checkpoint's file, not a re-serialization, is what the cell must carry). A recipe without a tokenizer gets none: optimum-rbln's step can make
one up from the config alone (a Qwen3 config gives a one-token tokenizer), and that is removed.

A quantized spec (a ``matrix.quantizations`` variant, or the recipe's ``quantization.weight_bits`` 8 or 4)
becomes optimum-rbln's ``rbln_config["quantization"]`` (``{"format": "rbln", "weights", "activations",
"kv_caches"}``, RBLNQuantizationConfig). optimum-rbln 0.12.0 loads such a model from a checkpoint already
quantized in its format (integer or fp8 weights with per-channel scales, ``memory._quantized``); it casts
float weights into integer parameters without scales, so the weights compiled are checked: a float
checkpoint is refused (``InputFailure``, kind ``quantization_unsupported``) rather than compiled wrong. A
variant of float weights reaches this backend already quantized by the build's stage (``variants._stage``).

Recipes without weights resolve a plan from the memory model, as with the ``torch`` backend.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import BackendUnavailable, BuildError, InputFailure, RecipeError
from ..estimator import DRAM_TENSOR_KEY, AllocationReport, KVTensor
from ..memory import GENERATION_CONFIG, copy_companions, remove_preprocessor_files
from ._base import Backend, CompileResult, CompileSpec, compile_plan, finalize_plan
from ._rbln_cell import check_count, keep_compiled_placement
from ._record import record_for, sha256_file, verify_programs, write_json, write_record

__all__ = ["RblnBackend", "INSTALL_HINT", "report_from_compiled"]

INSTALL_HINT = (
    "install the Rebellions SDK side: the rebel-compiler wheel from Rebellions' RBLN SDK (https://docs.rbln.ai), "
    "and optimum-rbln 0.12.0 with the PyTorch CPU index for its +cpu pins: "
    "`pip install optimum-rbln==0.12.0 --extra-index-url https://download.pytorch.org/whl/cpu` "
    "(a plain `pip install optimum-rbln==0.12.0` cannot resolve torchaudio==2.11.0+cpu); "
    "or use the embedded backend: matrix.backend=torch"
)
BASELINE_FILE = "baseline.json"
REPORT_FILE = "report.json"
_OWN_FILES = (BASELINE_FILE, REPORT_FILE)  # ours, in the baseline only; never copied into a cell
# optimum-rbln 0.12.0's compile-time error (modeling_attention_utils.py), worded as the estimator's.
_INSUFFICIENT = re.compile(
    r"Insufficient memory for the required KV cache: only \d+ blocks can be allocated, but at least \d+ blocks "
    r"are required\. Consider reducing `max_seq_len` or `batch_size` \(currently \d+\) to lower the memory requirement\."
)


def _find_sdk() -> None:
    """Cheap availability check (no import: importing the SDK pulls in torch and the compiler)."""
    missing = []
    for name in ("rebel", "optimum.rbln"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # "optimum" itself missing, or a broken parent package
            found = False
        if not found:
            missing.append(name)
    if missing:
        raise BackendUnavailable(
            f"backend 'rbln': cannot import {' and '.join(repr(m) for m in missing)}; {INSTALL_HINT}."
        )


def _import_sdk() -> tuple[Any, Any]:
    try:
        return importlib.import_module("rebel"), importlib.import_module("optimum.rbln")
    except ImportError as exc:
        raise BackendUnavailable(
            f"backend 'rbln': the SDK is installed but fails to import ({exc}); {INSTALL_HINT}."
        ) from exc


def _version(dist: str, module_name: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:  # e.g. a source checkout: ask the module itself
        return str(getattr(importlib.import_module(module_name), "__version__", "unknown"))


def _load_rbln_config(directory: Path) -> Any:
    """optimum-rbln's own config object for a compiled folder (what its loaders and CLI read)."""
    configuration = importlib.import_module("optimum.rbln.configuration_utils")
    try:
        config_cls, _ = configuration.load_config(str(directory))
        return config_cls.from_pretrained(str(directory))
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise BuildError(
            f"{directory / 'rbln_config.json'}: optimum-rbln cannot read it ({exc}); recompile this key."
        ) from None


def _read_baseline(directory: Path) -> dict[str, Any]:
    try:
        value = json.loads((directory / BASELINE_FILE).read_text(encoding="utf-8"))
        if not isinstance(value, dict) or "produced" not in value:
            raise ValueError("no 'produced'")
    except (OSError, ValueError) as exc:
        raise BuildError(f"{directory / BASELINE_FILE}: unreadable baseline ({exc}); recompile this key.") from None
    return value


def _compiled_models(rebel: Any, directory: Path, programs: dict[str, str]) -> dict[str, Any]:
    """The compiled models of a folder, each verified against its recorded sha256 before it is loaded."""
    if not programs:
        raise BuildError(f"{directory}: no *.rbln compiled models recorded; recompile this key.")
    verify_programs(directory, {"programs": programs})
    return {Path(name).stem: rebel.RBLNCompiledModel(directory / name) for name in sorted(programs)}


def report_from_compiled(compiled: dict[str, Any], rbln_config: Any) -> AllocationReport:
    """The AllocationReport of optimum-rbln compiled models, as its estimator reads them."""
    if "prefill" not in compiled:
        raise BuildError(f"compiled models {sorted(compiled)} have no 'prefill' graph; cannot size the KV cache.")
    alloc = {
        graph: {key: grid for key, grid in model.get_alloc_per_chiplet_by_key().items() if key != DRAM_TENSOR_KEY}
        for graph, model in sorted(compiled.items())
    }
    can_resize = {meta.name: bool(meta.can_resize) for meta in rbln_config.cache_metas}
    kv: dict[str, KVTensor] = {}
    for name, sizes in compiled["prefill"].exp_get_dram_tensor_sizes().items():
        if name not in can_resize:
            raise BuildError(f"KV tensor {name!r} has no entry in rbln_config.json cache_metas; recompile.")
        kv[name] = KVTensor.from_json({"can_resize": can_resize[name], "sizes": sizes}, f"kv_tensors.{name}")
    return AllocationReport.from_json(
        {
            "alloc": alloc,
            "kv_tensors": {n: t.to_json() for n, t in kv.items()},
            "current_blocks": int(rbln_config.kvcache_num_blocks or 1),
        }
    )


def quantization_option(spec: CompileSpec) -> dict[str, str] | None:
    """optimum-rbln 0.12.0's ``rbln_config["quantization"]`` for the spec's format (None: not
    quantized), or InputFailure when the weights it would compile are not quantized in optimum-rbln's
    format as that format needs (``memory._quantized``): a float checkpoint never compiles as quantized."""
    q = spec.quantized
    if q.is_none:
        return None
    recipe = spec.recipe
    where = f"{recipe.directory / 'recipe.yaml'}: variant {q.name} ({q.weights} weights)"
    layout = None
    if recipe.weights_path is not None:
        from ..memory import inspect_checkpoint

        layout = inspect_checkpoint(recipe.weights_path).quantized
    problem = None
    if layout is None:
        held = f"weights.path {recipe.weights_path} holds" if recipe.weights_path is not None else "seeded weights are"
        problem = (
            f"{held} unquantized {recipe.dtype} (no integer weights with scales); optimum-rbln would cast them "
            "without scales. rbln-build quantizes float weights itself when the variant comes from "
            "matrix.quantizations; point weights.path at a quantized checkpoint, or set quantization.weight_bits: 16"
        )
    elif (q.weights == "fp8") != (layout.storage == "fp8"):
        problem = f"the checkpoint holds {layout.storage} weights"
    elif q.activations != "fp16" and not layout.input_scales:
        problem = f"{q.activations} activations need input_scale tensors (calibration), and the checkpoint has none"
    elif q.kv_caches != "fp16" and not layout.kv_scales:
        problem = f"an {q.kv_caches} KV cache needs k_scale/v_scale tensors (calibration), and the checkpoint has none"
    if problem is not None:
        raise InputFailure(f"{where}, but {problem}.", "quantization_unsupported")
    return q.rbln_option()


def _compile_options(spec: CompileSpec) -> dict[str, Any]:
    """The rbln_config optimum-rbln compiles from: our resolved options under its names, blocks auto."""
    att = spec.attention
    quantization = quantization_option(spec)
    return {
        "npu": spec.npu.name,
        "num_devices": spec.num_devices,
        "batch_size": att.batch_size,
        "max_seq_len": att.max_seq_len,
        "attn_impl": att.attn_impl,
        "kvcache_partition_len": att.kvcache_partition_len,
        "kvcache_block_size": att.kvcache_block_size,
        "prefill_chunk_size": att.prefill_chunk_size,
        "create_runtimes": False,  # compile only: this host needs no NPU
        **({"quantization": quantization} if quantization is not None else {}),
    }


def _checkpoint_dir(spec: CompileSpec, folder: Path) -> Path:
    """A folder optimum-rbln compiles from: the recipe's config.json and the weights, nothing else."""
    recipe = spec.recipe
    if recipe.weights_path is not None:
        from ..memory import weights_folder

        weights = sorted(weights_folder(recipe).glob("*.safetensors"))
        if not weights:
            raise RecipeError(
                f"{recipe.directory / 'recipe.yaml'}: weights.path {recipe.weights_path} holds no *.safetensors "
                "files; point it at a local Hugging Face checkpoint saved as safetensors."
            )
        index = recipe.weights_path / "model.safetensors.index.json"
        for path in [*weights, *([index] if index.is_file() else [])]:
            os.symlink(path.resolve(), folder / path.name)
    else:
        from .torch._weights import build_model  # seeded weights: materialize an HF checkpoint once

        build_model(recipe).save_pretrained(str(folder))
    shutil.copyfile(recipe.directory / "config.json", folder / "config.json")  # the keyed config wins
    for name in recipe.tokenizer_files or ():  # its preprocessor step and generation config see the real ones
        os.symlink((recipe.directory / name).resolve(), folder / name)
    if recipe.generation_config:
        os.symlink((recipe.directory / recipe.generation_config).resolve(), folder / GENERATION_CONFIG)
    return folder


class RblnBackend(Backend):
    name = "rbln"

    def __init__(self) -> None:
        _find_sdk()

    def toolchain(self) -> dict[str, str]:
        return {
            "rebel-compiler": _version("rebel-compiler", "rebel"),
            "optimum-rbln": _version("optimum-rbln", "optimum.rbln"),
            # optimum-rbln pins both, but a plan's inventory (memory model) is built with them too
            "torch": metadata.version("torch"),
            "transformers": metadata.version("transformers"),
        }

    def compile(self, spec: CompileSpec, out_dir: Path) -> CompileResult:
        out_dir = Path(out_dir)
        if not spec.recipe.has_weights:
            return compile_plan(spec, out_dir)
        options = _compile_options(spec)  # an unusable quantization is refused before anything runs
        rebel, optimum_rbln = _import_sdk()
        import torch

        with tempfile.TemporaryDirectory(prefix="rbln-build-hf-") as tmp:
            model_dir = _checkpoint_dir(spec, Path(tmp))
            try:  # model_save_dir: optimum-rbln writes its files straight into out_dir (as save_pretrained would)
                optimum_rbln.RBLNAutoModelForCausalLM.from_pretrained(
                    str(model_dir),
                    export=True,
                    rbln_config=options,
                    dtype=getattr(torch, spec.recipe.dtype),
                    model_save_dir=str(out_dir),
                )
            except ValueError as exc:
                if _INSUFFICIENT.fullmatch(str(exc)):  # the model does not fit 100% of the target NPU
                    raise InputFailure(str(exc), "insufficient_memory") from None
                raise
        remove_preprocessor_files(out_dir)  # what its preprocessor step wrote (possibly made up) ...
        copy_companions(spec.recipe, out_dir)  # ... becomes the recipe's own files, byte for byte
        programs = {p.name: sha256_file(p) for p in sorted(out_dir.glob("*.rbln"))}
        report = report_from_compiled(_compiled_models(rebel, out_dir, programs), _load_rbln_config(out_dir))
        write_json(out_dir / REPORT_FILE, report.to_json())
        write_json(out_dir / BASELINE_FILE, {"produced": "rbln", "npu": spec.npu.name, "programs": programs})
        return CompileResult(report, "rbln")

    def finalize(self, spec: CompileSpec, baseline_dir: Path, num_blocks: int, out_dir: Path) -> None:
        baseline_dir, out_dir = Path(baseline_dir), Path(out_dir)
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise BuildError(f"finalize: kvcache_num_blocks must be a positive integer, got {num_blocks!r}.")
        baseline = _read_baseline(baseline_dir)
        if baseline["produced"] == "plan":
            return finalize_plan(spec, baseline_dir, num_blocks, out_dir)
        rebel, _ = _import_sdk()
        config = _load_rbln_config(baseline_dir)
        current = int(config.kvcache_num_blocks or 0)
        if current < 1:
            raise BuildError(
                f"{baseline_dir / 'rbln_config.json'}: kvcache_num_blocks is {current}, not a resolved block count; "
                "recompile this key."
            )
        check_count(spec, config, num_blocks, current)
        resizable = {meta.name: (num_blocks, current) for meta in config.cache_metas if meta.can_resize}
        compiled = _compiled_models(rebel, baseline_dir, baseline.get("programs") or {})
        for name, model in compiled.items():
            if not hasattr(model, "exp_rescale_buffer_size"):
                raise BackendUnavailable(
                    "backend 'rbln': this rebel-compiler cannot resize compiled KV buffers "
                    "(no exp_rescale_buffer_size); upgrade rebel-compiler."
                )
            if resizable:
                model.exp_rescale_buffer_size(resizable)
            model.save(out_dir / f"{name}.rbln")
        for item in sorted(baseline_dir.iterdir()):  # what optimum-rbln wrote besides models and config
            if item.suffix == ".rbln" or item.name == "rbln_config.json" or item.name in _OWN_FILES:
                continue
            if item.is_dir():
                shutil.copytree(item, out_dir / item.name)
            else:
                shutil.copyfile(item, out_dir / item.name)
        config.kvcache_num_blocks = num_blocks
        keep_compiled_placement(config, baseline_dir)
        config.save(str(out_dir))  # optimum-rbln's own writer: exactly what it writes, nothing it rejects
        programs = {f"{name}.rbln": sha256_file(out_dir / f"{name}.rbln") for name in compiled}
        write_record(out_dir, record_for(spec, num_blocks, "rbln", programs, directory=out_dir))
