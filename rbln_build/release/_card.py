"""A released cell's model card (``<cell>/README.md``): what it is, how much NPU memory it takes, and
how to serve and load it. Built from the manifest record and the cell's ``rbln-build.json`` only, so
the same cell always gets the same card. The serve command comes from the serving module (the same
function ``serve-command`` uses), with the cell's folder in the release as the model path.
"""

from __future__ import annotations

from typing import Any

from ..errors import UserError
from ..pipeline import command_for

__all__ = ["card_for", "serve_command_for", "DEFAULT_PORT"]

DEFAULT_PORT = 8000


def _n(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def serve_command_for(cell_id: str, record: dict[str, Any]) -> dict[str, Any] | None:
    """The cell's vllm-rbln command, run from the release's root (the folder holding release.json):
    paths into the cell (a compiled model, the cell's tokenizer) are ``./<cell id>``. None without a
    serving record; UserError (with the reason) when the record refuses every command."""
    serving = record.get("serving")
    if not isinstance(serving, dict):
        return None
    inputs = record.get("inputs") or {}
    devices = tuple(range(int(inputs.get("num_devices") or 1)))
    return command_for(serving, DEFAULT_PORT, devices, ".", cell_dir=f"./{cell_id}")


def _tokenizer_line(meta: dict[str, Any], serving: dict[str, Any]) -> str:
    if "tokenizer" not in meta:
        return "Tokenizer: not recorded by the build that made this cell (it predates tokenizer records)."
    tok = meta["tokenizer"]
    if not tok:
        source = serving.get("tokenizer")
        return "Tokenizer: **no tokenizer** in this cell" + (
            f"; vllm-rbln takes `{source}`'s." if source and not str(source).startswith("artifacts/") else "."
        )
    files = ", ".join(f"`{f}`" for f in tok.get("files", []))
    return f"Tokenizer: {files} in this folder (the checkpoint's files, byte for byte)."


def _load_lines(cell_id: str, record: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    produced = record.get("produced")
    has_tokenizer = bool(meta.get("tokenizer"))
    if produced == "rbln":
        cls = str(meta.get("cls_name") or "RBLNAutoModelForCausalLMConfig").removesuffix("Config")
        lines = [
            "```python",
            f"from optimum.rbln import {cls}",
            f'model = {cls}.from_pretrained("{cell_id}", export=False)  # kvcache_num_blocks '
            f"{record.get('kvcache_num_blocks')}, from rbln_config.json",
        ]
        if has_tokenizer:
            lines += [
                "from transformers import AutoTokenizer",
                f'tokenizer = AutoTokenizer.from_pretrained("{cell_id}")',
            ]
        return [*lines, "```"]
    if produced == "program":
        text = [f'python -m rbln_build.run {cell_id} --prompt "Hello" --max-new-tokens 8'] if has_tokenizer else []
        return [
            "A torch program for the CPU (rbln-build's own runtime); it is not an NPU model:",
            "```bash",
            *text,
            f"python -m rbln_build.run {cell_id} --prompt-ids 1,2,3 --max-new-tokens 8",
            "```",
        ]
    return ["A plan: the resolved configuration, no program. Nothing here loads; serve it as below."]


def _quantization(meta: dict[str, Any]) -> str:
    q = meta.get("quantization")
    if not isinstance(q, dict) or not q:
        return "none recorded"
    return ", ".join(f"{k} {v.get('name') if isinstance(v, dict) else v}" for k, v in sorted(q.items()))


def quality_lines(record: dict[str, Any]) -> list[str]:
    """A quantized variant's quality figures (``quantization._quality``), as the card shows them."""
    q = record.get("quality")
    if not isinstance(q, dict):
        return []
    if not q.get("measured"):
        return [f"Quality of this quantized variant: not measured ({q.get('reason')}).", ""]
    return [
        f"Quality of this quantized variant, measured on CPU against the float weights ({q.get('text')}, "
        f"{_n(q.get('text_tokens'))} tokens in rows of {_n(q.get('window'))}): perplexity {q.get('perplexity')} "
        f"against {q.get('float_perplexity')} ({float(q.get('perplexity_increase') or 0):+.2%}); greedy agreement "
        f"{float(q.get('greedy_agreement') or 0):.2%} of {_n(q.get('greedy_tokens'))} tokens.",
        "",
    ]


def _budget(value: Any) -> str:
    return "null (all available DRAM)" if value is None else _n(value)


def _weights(digest: Any) -> str:
    if not digest:
        return "weights from the recipe (no checkpoint digest)"
    return f"weights `{digest}`" if str(digest).startswith("sha256:") else f"weights sha256 `{digest}`"


def card_for(cell_id: str, record: dict[str, Any], meta: dict[str, Any]) -> str:
    inputs = record.get("inputs") or {}
    attention = inputs.get("attention") or {}
    floor = record.get("budget_for_floor") or {}
    full = record.get("budget_for_full_pool") or {}
    toolchain = ", ".join(f"{k} {v}" for k, v in sorted((inputs.get("toolchain") or {}).items())) or "-"
    serving = record.get("serving") or {}
    source = serving.get("model") if not serving.get("precompiled") else None
    out = [
        f"# {cell_id}",
        "",
        f"Released by rbln-build from a built manifest. Model `{inputs.get('model')}` (recipe "
        f"`{inputs.get('recipe')}`, recipe sha256 `{inputs.get('recipe_hash')}`, {_weights(inputs.get('weights_hash'))}"
        + (f", source `{source}`" if source else "")
        + f"); backend `{inputs.get('backend')}`, produced: **{record.get('produced')}**.",
        "",
        "| | |",
        "|---|---|",
        f"| target NPU | {inputs.get('npu')} x {inputs.get('num_devices')} (device `{inputs.get('device')}`) |",
        f"| requested budget | {_budget(record.get('memory_budget'))} = {_n(record.get('budget_bytes'))} bytes per device |",
        f"| kvcache_num_blocks | **{_n(record.get('kvcache_num_blocks'))}** |",
        f"| floor | {_n(record.get('num_min_blocks'))} blocks (needs {_n(floor.get('bytes'))} bytes per device) |",
        f"| full pool | {_n(record.get('num_full_blocks'))} blocks (needs {_n(full.get('bytes'))} bytes per device) |",
        f"| attention | {attention.get('attn_impl')}, block {_n(attention.get('kvcache_block_size'))}, "
        f"batch {_n(attention.get('batch_size'))}, max_seq_len {_n(attention.get('max_seq_len'))} |",
        f"| toolchain | {toolchain} |",
        f"| quantization | {_quantization(meta)} |",
        f"| generation config | {'`' + str(meta['generation_config']) + '`' if meta.get('generation_config') else 'none'} |",
        "",
        _tokenizer_line(meta, serving),
        "",
        *quality_lines(record),
        "## Serve with vllm-rbln",
        "",
    ]
    try:
        command = serve_command_for(cell_id, record)
    except UserError as exc:  # the serving record refuses: a program of a recipe without a hub model id
        command = None
        out.append(f"No serve command: {str(exc).removeprefix('no serve command: ')}")
    if command is None:
        out += [] if out[-1].startswith("No serve command") else ["No serving record: this cell did not build."]
    else:
        out += ["From the release's root (the folder holding `release.json`):", "", "```bash", command["shell"], "```"]
        if not serving.get("exact", True):
            out.append("These flags cannot pin this cell's block count; see the notes.")
        out += [f"- {note}" for note in serving.get("notes", [])]
    out += ["", "## Load", "", *_load_lines(cell_id, record, meta), ""]
    out += [
        "## Check before use",
        "",
        "```bash",
        "rbln-build verify .   # from the release's root: every file against release.json",
        "```",
        "",
        "This cell's whole manifest record is in `release.json`, under `cells`.",
        "",
    ]
    return "\n".join(out)
