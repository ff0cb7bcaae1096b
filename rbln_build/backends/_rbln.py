"""The ``rbln`` backend: the real Rebellions compiler through optimum-rbln 0.12.0.

Needs ``rebel`` (rebel-compiler, from Rebellions' SDK) and ``optimum.rbln``
(``pip install optimum-rbln==0.12.0``). Without them, constructing the backend raises
``BackendUnavailable`` saying what to install.

compile (once per compile key): optimum-rbln compiles the model with ``kvcache_num_blocks``
unset (auto: it sizes the KV buffers for the NPU it was told about), ``save_pretrained`` writes
``prefill.rbln``, ``decoder_batch_<b>.rbln``, ``rbln_config.json`` and ``config.json``. The
AllocationReport is read back from the compiled models, exactly what optimum-rbln's estimator
reads: ``get_alloc_per_chiplet_by_key()`` of every graph (non-KV bytes per node and chiplet),
``exp_get_dram_tensor_sizes()`` of the prefill graph (each KV tensor at the compiled block count)
and the ``can_resize`` of each entry of ``cache_metas`` (a full-attention cache compiled with auto
blocks; sliding-window caches are fixed). ``current_blocks`` is the compiled block count.

finalize (once per cell): the caller has already resolved ``num_blocks`` against the cell's
budget and target NPU (the estimator over this report, which is what ``--set-memory-budget``
does); finalize only rescales the resizable buffers of every graph with
``exp_rescale_buffer_size({name: (target, current)})``, saves them, and writes rbln_config.json
with ``kvcache_num_blocks`` = target and ``npu`` = the target NPU (optimum-rbln 0.12 forgets it).

Recipes without weights resolve a plan from the memory model, as with the ``torch`` backend.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import BackendUnavailable, BuildError
from ..estimator._report import DRAM_TENSOR_KEY, AllocationReport, KVTensor
from ._base import Backend, CompileResult, CompileSpec, compile_plan, finalize_plan, rbln_config_for

__all__ = ["RblnBackend", "INSTALL_HINT", "report_from_compiled"]

INSTALL_HINT = (
    "install optimum-rbln 0.12.0 (`pip install optimum-rbln==0.12.0`) and the rebel-compiler wheel from "
    "Rebellions' RBLN SDK (https://docs.rbln.ai), or use the embedded backend: matrix.backend=torch"
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
        raise BackendUnavailable(f"backend 'rbln': the SDK is installed but fails to import ({exc}); {INSTALL_HINT}.") from exc


def _version(dist: str, module_name: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:  # e.g. a source checkout: ask the module itself
        return str(getattr(importlib.import_module(module_name), "__version__", "unknown"))


def _can_resize(meta: dict[str, Any]) -> bool:
    # optimum-rbln's FullAttentionKVCacheMeta.can_resize: a full-attention cache compiled with auto
    # blocks. Sliding-window (and linear-attention) caches are fixed.
    return meta.get("layer_type") == "full_attention" and bool(meta.get("is_auto"))


def _read_config(directory: Path) -> dict[str, Any]:
    path = directory / "rbln_config.json"
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BuildError(f"{path}: unreadable rbln_config.json ({exc}); recompile this key.") from None
    return value


def _compiled_models(rebel: Any, directory: Path) -> dict[str, Any]:
    files = sorted(directory.glob("*.rbln"))
    if not files:
        raise BuildError(f"{directory}: no *.rbln compiled models; recompile this key.")
    return {p.stem: rebel.RBLNCompiledModel(p) for p in files}


def report_from_compiled(compiled: dict[str, Any], rbln_config: dict[str, Any]) -> AllocationReport:
    """The AllocationReport of optimum-rbln compiled models, as its estimator reads them."""
    if "prefill" not in compiled:
        raise BuildError(f"compiled models {sorted(compiled)} have no 'prefill' graph; cannot size the KV cache.")
    alloc = {
        graph: {key: grid for key, grid in model.get_alloc_per_chiplet_by_key().items() if key != DRAM_TENSOR_KEY}
        for graph, model in sorted(compiled.items())
    }
    metas = {m["name"]: m for m in rbln_config.get("cache_metas", [])}
    kv: dict[str, KVTensor] = {}
    for name, sizes in compiled["prefill"].exp_get_dram_tensor_sizes().items():
        if name not in metas:
            raise BuildError(f"KV tensor {name!r} has no entry in rbln_config.json cache_metas; recompile.")
        kv[name] = KVTensor.from_json({"can_resize": _can_resize(metas[name]), "sizes": sizes}, f"kv_tensors.{name}")
    current = int(rbln_config.get("kvcache_num_blocks") or 1)
    return AllocationReport.from_json(
        {
            "alloc": alloc,
            "kv_tensors": {n: t.to_json() for n, t in kv.items()},
            "current_blocks": current,
        }
    )


class RblnBackend(Backend):
    name = "rbln"

    def __init__(self) -> None:
        _find_sdk()

    @property
    def _rebel(self) -> Any:
        return _import_sdk()[0]

    @property
    def _optimum_rbln(self) -> Any:
        return _import_sdk()[1]

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
        recipe = spec.recipe
        if not recipe.has_weights:
            return compile_plan(spec, out_dir)
        # what optimum-rbln compiles from: our key names are its names; kvcache_num_blocks 0 = auto
        rbln_config = {
            key: value
            for key, value in rbln_config_for(spec, 0, "program").items()
            if key not in ("artifact", "cls_name", "kvcache_num_blocks", "dtype", "recipe")
        }
        rbln_config["create_runtimes"] = False
        with tempfile.TemporaryDirectory(prefix="rbln-build-hf-") as tmp:
            model_dir = self._checkpoint_dir(spec, Path(tmp))
            model = self._optimum_rbln.RBLNAutoModelForCausalLM.from_pretrained(
                str(model_dir), export=True, rbln_config=rbln_config
            )
            model.save_pretrained(str(out_dir))
        config = _read_config(out_dir)
        config["npu"] = spec.npu.name
        _write_config(out_dir, config)
        report = report_from_compiled(_compiled_models(self._rebel, out_dir), config)
        (out_dir / "report.json").write_text(json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n")
        (out_dir / "baseline.json").write_text(json.dumps({"produced": "program"}, sort_keys=True) + "\n")
        return CompileResult(report, "program")

    def _checkpoint_dir(self, spec: CompileSpec, tmp: Path) -> Path:
        recipe = spec.recipe
        if recipe.weights_path is not None:
            return recipe.weights_path
        from .torch._weights import build_model  # seeded weights: materialize an HF checkpoint once

        build_model(recipe).save_pretrained(str(tmp))
        return tmp

    def finalize(self, spec: CompileSpec, baseline_dir: Path, num_blocks: int, out_dir: Path) -> None:
        baseline_dir, out_dir = Path(baseline_dir), Path(out_dir)
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise BuildError(f"finalize: kvcache_num_blocks must be a positive integer, got {num_blocks!r}.")
        baseline = json.loads((baseline_dir / "baseline.json").read_text(encoding="utf-8"))
        if baseline.get("produced") == "plan":
            return finalize_plan(spec, baseline_dir, num_blocks, out_dir)
        config = _read_config(baseline_dir)
        current = int(config.get("kvcache_num_blocks") or 0)
        if current < 1:
            raise BuildError(
                f"{baseline_dir / 'rbln_config.json'}: kvcache_num_blocks is {current}, not a resolved block count; "
                "the baseline must be compiled with auto blocks."
            )
        compiled = _compiled_models(self._rebel, baseline_dir)
        resizable = {m["name"]: (num_blocks, current) for m in config.get("cache_metas", []) if _can_resize(m)}
        for name, model in compiled.items():
            if not hasattr(model, "exp_rescale_buffer_size"):
                raise BackendUnavailable(
                    "backend 'rbln': this rebel-compiler cannot resize compiled KV buffers "
                    "(no exp_rescale_buffer_size); upgrade rebel-compiler."
                )
            if resizable:
                model.exp_rescale_buffer_size(resizable)
            model.save(out_dir / f"{name}.rbln")
        for item in sorted(baseline_dir.iterdir()):
            if item.suffix == ".rbln" or item.name in ("rbln_config.json", "report.json", "baseline.json"):
                continue
            if item.is_file():
                shutil.copyfile(item, out_dir / item.name)
        config["kvcache_num_blocks"] = num_blocks
        config["npu"] = spec.npu.name
        config["artifact"] = "program"
        _write_config(out_dir, config)


def _write_config(directory: Path, config: dict[str, Any]) -> None:
    (directory / "rbln_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
