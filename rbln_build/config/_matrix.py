"""Matrix expansion: BuildSettings -> cells, in a stable order, with stable readable ids.

Order: models x devices x batch_sizes x max_seq_lens x quantizations x kvcache_num_blocks x budgets, each axis in
the order the config lists it (budgets vary fastest); then the same product of each
``matrix.include`` entry, in the order listed. A cell that an include entry repeats (same id: same
model, device, explicit options and budget, hence the same inputs) is kept once, where it first
appears; two cells with one id but different inputs are a ConfigError naming both places. A cell id names the model, the device and the
budget, plus a suffix for every build option the *matrix* sets explicitly, so an id never depends on
which other cells are in the matrix (a narrowed run or a multirun job gives the same ids)::

    qwen3_8b.rebel100.b0.3          budget 0.3 (float fraction)
    qwen3_8b.rebel100.b1            budget 1 (one byte: an int is a byte count)
    qwen3_8b.rebel100.b1.0          budget 1.0 (100%)
    qwen3_8b.rebel100.bnone         budget null (all available DRAM)
    qwen3_8b.rebel100.b50pct        budget "50%";  b10GB: budget "10GB"
    qwen3_8b.atom_max_x4.bs1.s8192.b0.5.n12   matrix batch_sizes/max_seq_lens set; explicit 12 blocks
    qwen3_8b.rebel100.w8.b0.5       matrix.quantizations set: the variant's name (none, w8, w4, ...)

A quantized variant's cell compiles its recipe with ``weight_bits`` of the variant (the memory model's
accounting) and the variant in its compile key; what a recipe cannot give (a variant other than its
checkpoint's own quantization, activations or KV cache without calibration scales, a non weight-only
variant on the torch backend) makes that cell fail with kind ``quantization_unsupported``.

Attention options are resolved here (cheaply, no torch) because they are part of the compile key.
An invalid combination (e.g. a max_seq_len that is not a multiple of the partition) makes that cell
fail with the estimator's exact error; the other cells still build.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, EstimateError
from ..estimator import (
    ATTENTION_OPTIONS,
    NpuTarget,
    attention_options,
    cell_id_problem,
    format_budget,
    resolve_attention,
    resolve_npu,
)
from ..memory import CompileSpec, Recipe, load_recipe
from ..quantization import Quantization, from_weight_bits, weight_only
from ..quantization import quality_gate as _gate
from ..store import cell_key, compile_key, digest, key_code_versions
from ._config import BuildSettings, Device, ExpectedFailure, Model, SubMatrix

if TYPE_CHECKING:
    from ..estimator import Request

__all__ = ["Cell", "expand", "format_budget", "BUILD_OPTIONS"]

BUILD_OPTIONS = ATTENTION_OPTIONS  # the build options a recipe, a model config or the matrix may set


@dataclass(frozen=True)
class Cell:
    id: str
    model: str
    device: Device
    recipe: Recipe
    npu: NpuTarget
    options: tuple[tuple[str, Any], ...]  # build options as requested (before NPU defaults), sorted
    memory_budget: Any  # exactly as configured
    kvcache_num_blocks: int  # 0 = auto
    backend: str
    spec: CompileSpec | None  # None when the attention options are invalid for this NPU
    compile_key: str | None
    cell_key: str
    setup_error: tuple[str, str] | None  # (message, kind) when the cell cannot even be compiled
    expected: ExpectedFailure | None
    toolchain: tuple[tuple[str, str], ...] = ()  # the backend's toolchain versions (in the compile key)
    quantization: Quantization | None = None  # the matrix.quantizations variant; None: the recipe's own
    # matrix.max_perplexity_increase / min_greedy_agreement (those set), on a quantized variant's cell
    quality_gate: tuple[tuple[str, float], ...] | None = None

    def option(self, key: str) -> Any:
        return dict(self.options).get(key)

    def request(self, current_blocks: int) -> Request:
        """The estimator's request for this cell: its raw options (so the warnings about defaults
        the estimator fills in reach the manifest), budget and explicit count."""
        from ..estimator import Request

        return Request(
            npu=self.npu.name,
            num_devices=self.device.num_devices,
            **attention_options(dict(self.options)),
            kvcache_num_blocks=self.kvcache_num_blocks,
            memory_budget=self.memory_budget,
            current_blocks=current_blocks,
        )

    def inputs_key(self) -> tuple[Any, ...]:
        """Everything ``inputs`` holds but the budget, hashable: the cells of a sweep that differ in
        their budget alone share it (``_manifest.manifest_line`` renders their inputs once)."""
        attention = None if self.spec is None else self.spec.attention
        recipe, device = self.recipe, self.device
        return (
            self.model,
            recipe.name,
            recipe.content_hash,
            recipe.weights_hash,
            device.name,
            self.npu.name,
            device.num_devices,
            self.backend,
            self.options,
            attention,
            self.kvcache_num_blocks,
            self.toolchain,
            self.quantization,
            self.quality_gate,
        )

    def inputs(self) -> dict[str, Any]:
        """The cell's inputs as plain JSON (for the manifest). Besides the budget, a function of
        ``inputs_key`` alone: a value added here is added there too."""
        return {
            "model": self.model,
            "recipe": self.recipe.name,
            "recipe_hash": self.recipe.content_hash,
            "weights_hash": self.recipe.weights_hash,
            "device": self.device.name,
            "npu": self.npu.name,
            "num_devices": self.device.num_devices,
            "backend": self.backend,
            "build_options": dict(self.options),
            "attention": None if self.spec is None else self.spec.attention.to_json(),
            "memory_budget": self.memory_budget,
            "kvcache_num_blocks": self.kvcache_num_blocks,
            # What else the keys hash, so that `rbln-build status` can name the input that changed.
            "toolchain": dict(self.toolchain),
            "code": key_code_versions(self.backend),
            **({} if self.quantization is None else {"quantization": self.quantization.to_json()}),
            **({} if self.quality_gate is None else {"quality_gate": dict(self.quality_gate)}),
        }


def _options(model: Model, recipe: Recipe, m: SubMatrix, batch: int | None, seq: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in BUILD_OPTIONS:
        value = recipe.build.get(key)
        if model.option(key) is not None:
            value = model.option(key)
        out[key] = value
    if batch is not None:
        out["batch_size"] = batch
    if seq is not None:
        out["max_seq_len"] = seq
    if m.attn_impl is not None:
        out["attn_impl"] = m.attn_impl
    if m.kvcache_partition_len is not None:
        out["kvcache_partition_len"] = m.kvcache_partition_len
    return {k: v for k, v in out.items() if v is not None}


def _suffix(m: SubMatrix, batch: int | None, seq: int | None, quant: Quantization | None = None) -> str:
    parts = []
    if batch is not None:
        parts.append(f"bs{batch}")
    if seq is not None:
        parts.append(f"s{seq}")
    if m.attn_impl is not None:
        parts.append(m.attn_impl)
    if m.kvcache_partition_len is not None:
        parts.append(f"p{m.kvcache_partition_len}")
    if quant is not None:
        parts.append(quant.name)
    return "".join("." + p for p in parts)


def variant_problem(recipe: Recipe, quant: Quantization | None, backend: str) -> str | None:
    """Why ``recipe`` cannot give the variant ``quant`` (None: the recipe's own), or None."""
    layout = recipe.quantized
    own = from_weight_bits(recipe.weight_bits)
    if layout is not None and layout.storage == "fp8":
        own = Quantization(weights="fp8")
    q = own if quant is None else quant
    if layout is not None and q.weights != own.weights:
        return (
            f"variant {q.name}: recipe {recipe.name}'s checkpoint is already quantized ({own.weights} weights), so it "
            "gives that format only; point weights.path at the float checkpoint to make the other variants"
        )
    if recipe.has_weights and layout is None and not weight_only(q):
        return (
            f"variant {q.name}: quantized activations or KV caches need calibration scales (input_scale, k_scale, "
            f"v_scale) and rbln-build's round-to-nearest stage makes weight-only variants; recipe {recipe.name} "
            "needs a checkpoint already quantized with those scales"
        )
    if layout is not None and q.activations != "fp16" and not layout.input_scales:
        return f"variant {q.name}: recipe {recipe.name}'s checkpoint has no input_scale tensors for {q.activations} activations"
    if layout is not None and q.kv_caches != "fp16" and not layout.kv_scales:
        return f"variant {q.name}: recipe {recipe.name}'s checkpoint has no k_scale/v_scale tensors for an fp8 KV cache"
    if backend == "torch" and recipe.has_weights and not weight_only(q):
        return f"variant {q.name}: the torch backend runs weight-only variants; build it with matrix.backend=rbln"
    return None


def expand(settings: BuildSettings, toolchain: dict[str, str]) -> list[Cell]:
    """Every cell of the matrix, in order: the main product, then each ``include`` entry's.
    Raises ConfigError/RecipeError for bad config or recipes."""
    m = settings.matrix
    parts = m.parts()
    recipes: dict[str, Recipe] = {}
    npus: dict[str, NpuTarget] = {}
    for part in parts:
        for model in part.models:
            if model.recipe not in recipes:
                recipes[model.recipe] = load_recipe(
                    model.recipe, settings.recipe_dirs or settings.recipes_dir, settings.build_dir / "cache" / "weights"
                )
        for device in part.devices:
            if device.name not in npus:
                try:
                    npus[device.name] = resolve_npu(device.npu)
                except EstimateError as exc:
                    raise ConfigError(f"device {device.name}: npu: {exc}") from None
    expected = {e.cell: e for e in m.expect_failure}
    cells: dict[str, Cell] = {}
    where: dict[str, str] = {}  # cell id -> the part that first defined it
    for part in parts:
        for cell in _expand_part(part, recipes, npus, m.backend, toolchain, expected, _gate(m)):
            first = cells.get(cell.id)
            if first is None:
                cells[cell.id] = cell
                where[cell.id] = part.where
            elif first.cell_key != cell.cell_key:
                raise ConfigError(
                    f"{part.where}: cell {cell.id} is also defined by {where[cell.id]} with different inputs "
                    f"(budgets {first.memory_budget!r} and {cell.memory_budget!r}); change one of them."
                )
            # else: the same cell again (an include entry repeating a cell): the first one stands.
    if not m.narrowed:  # a narrowed run holds a part of the matrix: the whole one is checked when built
        for i, e in enumerate(m.expect_failure):
            if e.cell not in cells:
                some = ", ".join(list(cells)[:3]) or "none"
                raise ConfigError(
                    f"matrix.expect_failure[{i}].cell: {e.cell!r} names no cell of the matrix ({len(cells)} cells, "
                    f"e.g. {some}); fix the cell id or remove the entry."
                )
    return list(cells.values())


def _expand_part(
    m: SubMatrix,
    recipes: dict[str, Recipe],
    npus: dict[str, NpuTarget],
    backend: str,
    toolchain: dict[str, str],
    expected: dict[str, ExpectedFailure],
    gate: tuple[tuple[str, float], ...] | None = None,
) -> list[Cell]:
    cells: list[Cell] = []
    seen: dict[str, str] = {}
    tools = tuple(sorted(toolchain.items()))
    for model in m.models:
        recipe = recipes[model.recipe]
        for device in m.devices:
            npu = npus[device.name]
            for batch, seq, quant in _option_rows(m):
                options = _options(model, recipe, m, batch, seq)
                if "max_seq_len" not in options:  # set nowhere: a configuration gap, not a cell's failure
                    raise ConfigError(
                        f"{m.where}: model {model.name}: max_seq_len is set nowhere; set it in "
                        f"{recipe.directory / 'recipe.yaml'} (build: {{max_seq_len: N}}), in conf/model/"
                        f"{model.name}.yaml, or with matrix.max_seq_lens=[N]."
                    )
                spec, ckey, setup_error = _compile_of(recipe, npu, device, options, backend, toolchain, quant)
                row = tuple(sorted(options.items()))
                group = ckey or digest({"setup_error": setup_error})
                quality_gate = gate if quant is not None and not quant.is_none else None
                if quality_gate is not None:  # the gate decides the cell's outcome: in its key
                    group = digest({"cells_of": group, "quality_gate": dict(quality_gate)})
                for blocks in m.kvcache_num_blocks:
                    for budget in m.budgets:
                        cid = f"{model.name}.{device.name}{_suffix(m, batch, seq, quant)}.b{format_budget(budget)}" + (
                            f".n{blocks}" if blocks else ""
                        )
                        problem = cell_id_problem(cid)
                        if problem is not None:
                            raise ConfigError(f"{m.where}: {problem}.")
                        if cid in seen:
                            raise ConfigError(
                                f"{m.where}: two cells have the id {cid!r} (budgets {seen[cid]} and {budget!r}); "
                                "list each value once."
                            )
                        seen[cid] = repr(budget)
                        try:
                            key = cell_key(group, npu.name, budget, blocks)
                        except ValueError as exc:
                            raise ConfigError(
                                f"{m.where}.budgets: {exc}; use null, a fraction, bytes or a string."
                            ) from None
                        cells.append(
                            Cell(
                                id=cid,
                                model=model.name,
                                device=device,
                                recipe=recipe,
                                npu=npu,
                                options=row,
                                memory_budget=budget,
                                kvcache_num_blocks=blocks,
                                backend=backend,
                                spec=spec,
                                compile_key=ckey,
                                cell_key=key,
                                setup_error=setup_error,
                                expected=expected.get(cid),
                                toolchain=tools,
                                quantization=quant,
                                quality_gate=quality_gate,
                            )
                        )
    return cells


def _option_rows(m: SubMatrix) -> list[tuple[int | None, int | None, Quantization | None]]:
    return [
        (batch, seq, quant)
        for batch in m.batch_sizes or (None,)
        for seq in m.max_seq_lens or (None,)
        for quant in m.quantizations or (None,)
    ]


def _compile_of(
    recipe: Recipe,
    npu: NpuTarget,
    device: Device,
    options: dict[str, Any],
    backend: str,
    toolchain: dict[str, str],
    quant: Quantization | None = None,
) -> tuple[CompileSpec | None, str | None, tuple[str, str] | None]:
    problem = variant_problem(recipe, quant, backend)
    if problem is not None:
        return None, None, (problem, "quantization_unsupported")
    try:
        attention = resolve_attention(npu, **attention_options(options))
    except EstimateError as exc:
        return None, None, (str(exc), exc.kind)
    if quant is not None and recipe.quantized is None:  # the memory model accounts the variant's weights
        recipe = replace(recipe, weight_bits=quant.weight_bits)
    spec = CompileSpec(recipe=recipe, npu=npu, num_devices=device.num_devices, attention=attention, quantization=quant)
    return spec, compile_key(spec.key_fields(), backend, toolchain), None
