"""The ``torch`` backend: a paged-KV ``torch.export`` program that really runs on CPU.

compile (once per compile key) writes the baseline::

    program.pt2     the exported program with its weights (shape-polymorphic in num_blocks)
    config.json     the HF config of the model
    report.json     the AllocationReport from the memory model (rbln_build.memory)
    baseline.json   what was produced, the KV pool geometry, the program's sha256, exports made

finalize (once per cell) writes the cell artifact, which is self-contained::

    program.pt2     a hard link to (or copy of) the baseline's program
    config.json     the HF config
    tokenizer files, generation_config.json   the recipe's (a checkpoint's), byte for byte, if it has them
    rbln-build.json optimum-rbln key names; kvcache_num_blocks = the resolved count; npu; the KV pool
                    geometry; ``programs``: the program's sha256, checked before every load

No ``rbln_config.json``: a CPU program is not something optimum-rbln or vllm-rbln can load, so
nothing in it is named as if it were.

A recipe without weights gets a plan: compile writes report.json, config.json and baseline.json
(``"produced": "plan"``), finalize writes rbln-build.json with ``"artifact": "plan"`` and no
program. Nothing is ever faked.

Files are byte-identical for identical inputs: JSON is written with sorted keys, and
``torch.export.save`` writes fixed zip timestamps; its archive prefix comes from the file name,
which is always ``program.pt2``. The example inputs of the export are not saved.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

from ...errors import BuildError, InputFailure
from ...memory import copy_companions, copy_from
from .._base import Backend, CompileResult, CompileSpec, compile_plan, finalize_plan
from .._record import record_for, sha256_file, write_json, write_record
from ._archive import check_program_archive

__all__ = ["TorchExportBackend", "PROGRAM_FILE"]

PROGRAM_FILE = "program.pt2"
BASELINE_FILE = "baseline.json"
FORMAT = "rbln-build/torch-export/2"  # 2: key_positions input, whole-prompt prefill


class TorchExportBackend(Backend):
    name = "torch"

    def toolchain(self) -> dict[str, str]:
        return {"torch": metadata.version("torch"), "transformers": metadata.version("transformers"), "format": FORMAT}

    def compile(self, spec: CompileSpec, out_dir: Path) -> CompileResult:
        out_dir = Path(out_dir)
        recipe, att = spec.recipe, spec.attention
        if not recipe.has_weights:
            return compile_plan(spec, out_dir, format=FORMAT, exports=0)
        quantized = spec.quantized
        if quantized.activations != "fp16" or quantized.kv_caches != "fp16":
            raise InputFailure(
                f"{recipe.directory / 'recipe.yaml'}: variant {quantized.name} quantizes activations or the KV cache; "
                "the torch backend runs weight-only variants (de-quantized weights) and never approximates the others; "
                "build it with matrix.backend=rbln, or use a weight-only variant (w8, w4, wfp8).",
                "quantization_unsupported",
            )
        if not quantized.is_none and recipe.quantized is None:
            raise InputFailure(  # the build's quantization stage gives it quantized weights; never silently float
                f"{recipe.directory / 'recipe.yaml'}: variant {quantized.name}, but its weights are float; "
                "rbln-build quantizes them in the build (matrix.quantizations) before the compile.",
                "quantization_unsupported",
            )

        import torch

        from ... import memory  # lazily: the memory model pulls in the inventory machinery
        from . import _paged as paged
        from ._weights import build_model

        model = build_model(recipe)
        report = memory.build_report(spec, inventory=_inventory_of(model, recipe))
        wrapper = paged.PagedCausalLM(model, att.kvcache_block_size)
        program = paged.export_paged(
            wrapper,
            max_batch=att.batch_size,
            max_tokens=att.max_seq_len,  # a whole prompt in one call, as transformers' generate runs it
            max_table_blocks=att.blocks_per_sequence,
            max_num_blocks=att.num_full_blocks,
        )
        program._example_inputs = None  # 2 x layers example pools would be saved otherwise
        paged.strip_source_paths(program)  # no absolute paths in artifacts
        torch.export.save(program, str(out_dir / PROGRAM_FILE))
        write_json(out_dir / "config.json", recipe.hf_config)
        copy_companions(recipe, out_dir)
        write_json(out_dir / "report.json", report.to_json())
        write_json(
            out_dir / BASELINE_FILE,
            {
                "format": FORMAT,
                "produced": "program",
                "exports": 1,
                "program": PROGRAM_FILE,
                "program_sha256": sha256_file(out_dir / PROGRAM_FILE),
                "pool": {
                    "num_layers": wrapper.num_layers,
                    "kv_heads": wrapper.kv_heads,
                    "block_size": wrapper.block_size,
                    "head_dim": wrapper.head_dim,
                    "dtype": str(wrapper.dtype).removeprefix("torch."),
                    "layer_types": list(wrapper.layer_types),
                },
            },
        )
        return CompileResult(report, "program")

    def finalize(self, spec: CompileSpec, baseline_dir: Path, num_blocks: int, out_dir: Path) -> None:
        baseline_dir, out_dir = Path(baseline_dir), Path(out_dir)
        att = spec.attention
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise BuildError(f"finalize: kvcache_num_blocks must be a positive integer, got {num_blocks!r}.")
        if num_blocks > att.num_full_blocks:
            raise BuildError(
                f"finalize: kvcache_num_blocks {num_blocks} exceeds the full pool of {att.num_full_blocks} blocks "
                f"(max_seq_len {att.max_seq_len} // block {att.kvcache_block_size} * batch {att.batch_size})."
            )
        try:
            baseline = json.loads((baseline_dir / BASELINE_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BuildError(f"{baseline_dir / BASELINE_FILE}: unreadable baseline ({exc}); recompile.") from None
        produced = baseline.get("produced")
        if produced == "plan":
            return finalize_plan(spec, baseline_dir, num_blocks, out_dir)
        if produced != "program":
            raise BuildError(f"{baseline_dir / BASELINE_FILE}: unknown 'produced' {produced!r}; recompile.")
        src = baseline_dir / PROGRAM_FILE
        if not src.is_file() or sha256_file(src) != baseline.get("program_sha256"):
            raise BuildError(f"{src}: missing or does not match its recorded sha256; recompile this key.")
        check_program_archive(src.read_bytes(), src)  # a cell never links a program that is not data only
        _link_or_copy(src, out_dir / PROGRAM_FILE)
        shutil.copyfile(baseline_dir / "config.json", out_dir / "config.json")
        copy_from(baseline_dir, out_dir, spec.recipe.license_file)
        record = record_for(
            spec,
            num_blocks,
            "program",
            programs={PROGRAM_FILE: baseline["program_sha256"]},
            directory=out_dir,
            kv_pool=dict(baseline["pool"], num_blocks=num_blocks),
        )
        write_record(out_dir, record)


def _inventory_of(model: Any, recipe: Any) -> Any:
    """The inventory of the live model if the inventory module offers it; else None (from config)."""
    try:
        from ...memory import inventory_from_model
    except ImportError:
        return None
    sha = hashlib.sha256((recipe.directory / "config.json").read_bytes()).hexdigest()
    return inventory_from_model(model, config_sha256=sha)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
