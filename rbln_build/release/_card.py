"""A released cell's model card (``<cell>/README.md``): what it is, how much NPU memory it takes, and
how to serve and load it. Built from the manifest record and the cell's ``rbln-build.json`` only, so
the same cell always gets the same card. The serve command comes from the serving module (the same
function ``serve-command`` uses), with the cell's folder (named after the cell, in a release or
downloaded from the Hub with ``--local-dir <cell id>``) as the model path.

It starts with Hugging Face Hub front matter (YAML between ``---`` lines, what ``huggingface_hub.ModelCard``
reads): ``library_name`` (``optimum-rbln`` for an rbln cell, ``rbln-build`` for a torch program, which
only rbln-build's runtime loads; none for a plan, which loads nothing), ``base_model`` (the recipe's hub
model, ``rbln-build.json`` ``base_model``; never a made-up id), ``pipeline_tag: text-generation``,
``license`` (the recipe's id; ``other`` with ``license_name``/``license_link`` to the cell's licence
file when the id is ``other`` or unknown but a file is there; ``unknown`` without either), ``language``
(the recipe's ``language``, ``rbln-build.json`` ``language``; none when it names none) and ``tags``
(rbln-build, the NPU, the artifact kind).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from ..errors import UserError
from ..pipeline import command_for

__all__ = ["card_for", "front_matter", "serve_command_for", "DEFAULT_PORT"]

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
    """The cell's vllm-rbln command, run from the folder holding the cell's folder (a release's root,
    or where it was downloaded with ``--local-dir <cell id>``): paths into the cell (a compiled model,
    the cell's tokenizer) are ``./<cell id>``. None without a serving record; UserError (with the
    reason) when the record refuses every command."""
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
    """A quantized variant's quality figures (``variants._quality``), as the card shows them."""
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


LIBRARY = {"rbln": "optimum-rbln", "program": "rbln-build"}  # a plan loads nothing: no library


def front_matter(cell_id: str, record: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """The card's Hub metadata (the module's docstring says each field's source)."""
    inputs = record.get("inputs") or {}
    produced = str(record.get("produced"))
    out: dict[str, Any] = {}
    if produced in LIBRARY:
        out["library_name"] = LIBRARY[produced]
    if isinstance(meta.get("base_model"), str):
        out["base_model"] = meta["base_model"]
    out["pipeline_tag"] = "text-generation"
    lic: dict[str, Any] = meta["license"] if isinstance(meta.get("license"), dict) else {}
    ident = lic.get("id") if isinstance(lic.get("id"), str) else None
    file = lic.get("file") if isinstance(lic.get("file"), str) else None
    if ident and ident != "other":
        out["license"] = ident
    elif file:
        recipe = re.sub(r"[^a-z0-9.-]+", "-", str(inputs.get("recipe") or "model").lower()).strip("-.") or "model"
        out.update({"license": "other", "license_name": f"{recipe}-license", "license_link": str(file)})
    else:
        out["license"] = "other" if ident == "other" else "unknown"
    language = meta.get("language")
    if isinstance(language, list) and language and all(isinstance(code, str) for code in language):
        out["language"] = list(language)
    npu = str(inputs.get("npu") or meta.get("npu") or "")
    tags = ["rbln-build", "rebellions", *([npu] if npu else []), f"rbln-build-{produced}"]
    if produced == "rbln":
        tags.append("optimum-rbln")
    out["tags"] = tags
    return out


def _front_matter_text(cell_id: str, record: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    data = yaml.safe_dump(front_matter(cell_id, record, meta), sort_keys=False, allow_unicode=True)
    return ["---", *data.rstrip("\n").splitlines(), "---", ""]


def card_for(cell_id: str, record: dict[str, Any], meta: dict[str, Any], hub_org: str | None = None) -> str:
    inputs = record.get("inputs") or {}
    attention = inputs.get("attention") or {}
    floor = record.get("budget_for_floor") or {}
    full = record.get("budget_for_full_pool") or {}
    toolchain = ", ".join(f"{k} {v}" for k, v in sorted((inputs.get("toolchain") or {}).items())) or "-"
    serving = record.get("serving") or {}
    source = serving.get("model") if not serving.get("precompiled") else None
    out = [
        *_front_matter_text(cell_id, record, meta),
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
        out += [
            f"From the folder holding this cell's folder `{cell_id}` (a release's root, or where you downloaded "
            "it, below); vllm-rbln serves a compiled model from a local folder, never from a repo id:",
            "",
            "```bash",
            command["shell"],
            "```",
        ]
        if not serving.get("exact", True):
            out.append("These flags cannot pin this cell's block count; see the notes.")
        out += [f"- {note}" for note in serving.get("notes", [])]
    out += ["", "## Load", "", *_load_lines(cell_id, record, meta), ""]
    repo = f"{hub_org}/{cell_id}" if hub_org else "<org>/<repo>"
    out += [
        "## Check before use",
        "",
        "This folder checks itself: `rbln-build-files.json` lists every other file's size and sha256 (and "
        "its own hash); `python -m rbln_build.run` checks it before it loads anything.",
        "",
        "```bash",
        f"huggingface-cli download {repo} --local-dir {cell_id}   # a Hub copy, into a folder named after the cell",
        f"rbln-build verify {cell_id}",
        "```",
        "",
        "`rbln-build-files.json` also holds this cell's whole manifest record (`record`); in a release folder, "
        "`rbln-build verify <release>` checks every cell against `release.json`.",
        "",
    ]
    return "\n".join(out)
