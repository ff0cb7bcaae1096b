"""Generate greedy tokens from a ``torch`` cell artifact on CPU.

    python -m rbln_build.run ARTIFACT --prompt-ids 1,2,3 [--prompt-ids 4,5] --max-new-tokens 8
    python -m rbln_build.run --manifest build/manifest.json CELL_ID --prompt-ids 1,2,3
    python -m rbln_build.run ARTIFACT --prompt "some text" --max-new-tokens 8
    python -m rbln_build.run ARTIFACT --chat "What is the capital of France?" --max-new-tokens 64

Prints one line per prompt: ``prompt <i>: <comma-separated new token ids>``. With ``--prompt`` the
text is encoded with the cell's own tokenizer (the checkpoint's files it carries; rbln-build.json
``"tokenizer"``), generation stops at any end-of-sequence id of the cell's ``generation_config.json``
(unless ``--eos-token-id`` says otherwise), and the decoded new text is printed, one prompt after the
other, each followed by a newline (special tokens skipped, as ``tokenizer.decode(...,
skip_special_tokens=True)`` gives it). ``--chat`` does the same with the question put through the
cell's chat template first (one user message, with the generation prompt, as
``tokenizer.apply_chat_template(..., add_generation_prompt=True)`` gives it); a cell whose tokenizer
has no chat template is refused, pointing to ``--prompt``. The tokens are transformers' greedy
``generate`` on the same weights in the cell's dtype (docs/backends.md says how, and what was
measured). A cell without a tokenizer is refused with the reason. Artifacts are code, so
nothing is loaded before it is verified: the program's sha256 against the cell's rbln-build.json
and its archive against the pickle allowlist (``backends.torch._archive``); with ``--manifest``,
first the whole cell folder against the manifest's ``artifact.content_hash``, so rewriting
rbln-build.json together with the program is caught too; a released cell (``<release>/<cell id>``,
``release.json`` beside it) is first checked against ``release.json`` (every file's size and sha256,
nothing extra, no link, its self-hash), which catches the same rewrite; a released cell that travels
alone (a Hub repo) against its own ``rbln-build-files.json`` the same way. Errors (a missing artifact, a failed
check, a plan instead of a program, a request bigger than the KV pool) print one line to stderr and
exit with status 2; ``RBLN_BUILD_FULL_ERROR=1`` shows the traceback. docs/security.md says what is
and is not verified.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path
from typing import Any, NoReturn

from ._documents import load_json
from .errors import InputError, IntegrityError, RblnBuildError, UserError

__all__ = ["main", "released_cell", "verified_cell"]


def _token_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,2,3, got {text!r}") from None
    if not ids:
        raise argparse.ArgumentTypeError("a prompt needs at least one token id")
    return ids


class _Parser(argparse.ArgumentParser):
    """Usage errors on one line (exit 2), as every other error of this command."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message}; see python -m rbln_build.run --help", file=sys.stderr)
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m rbln_build.run",
        description=textwrap.fill(
            "Load a cell artifact built by the 'torch' backend (a folder with program.pt2, "
            "rbln-build.json and config.json; a built or a released cell), verify it, and print greedy tokens "
            "(or, with --prompt, text through the cell's own tokenizer; with --chat, the answer to a question "
            "put through the cell's chat template) for a batch of prompts. "
            "The KV-cache pool has exactly the artifact's kvcache_num_blocks blocks, shared by the batch. "
            "The tokens are transformers' greedy generate on the same weights, in the cell's dtype.",
            width=100,
        ),
        epilog="examples: python -m rbln_build.run build/artifacts/tiny_llama.atom_max.b0.3 "
        "--prompt-ids 1,2,3 --prompt-ids 4,5 --max-new-tokens 8\n"
        "          python -m rbln_build.run --manifest build/manifest.json tiny_llama.atom_max.b0.3 --prompt-ids 1,2,3\n"
        '          python -m rbln_build.run CELL --chat "What is the capital of France?" --max-new-tokens 64',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "artifact", metavar="ARTIFACT", help="cell artifact folder; with --manifest, the cell id in that manifest"
    )
    p.add_argument(
        "--manifest",
        metavar="MANIFEST",
        default=None,
        help="verify the cell against this manifest's artifact content hash before loading it",
    )
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--prompt-ids",
        type=_token_ids,
        action="append",
        metavar="IDS",
        help="comma-separated token ids of one prompt; repeat for a batch (at most the artifact's batch_size)",
    )
    given.add_argument(
        "--prompt",
        action="append",
        metavar="TEXT",
        help="a text prompt, encoded as it is with the cell's tokenizer; prints the decoded text (repeat for a batch)",
    )
    given.add_argument(
        "--chat",
        action="append",
        metavar="QUESTION",
        help="a question, put through the cell's chat template (one user message and the generation prompt); "
        "prints the decoded answer (repeat for one answer per question)",
    )
    p.add_argument(
        "--max-new-tokens", type=int, default=8, metavar="N", help="tokens to generate per prompt (default 8)"
    )
    p.add_argument(
        "--eos-token-id",
        type=int,
        default=None,
        metavar="ID",
        help="stop a prompt early when it generates this id (default: with --prompt or --chat, the eos ids of the cell's "
        "generation_config.json; with --prompt-ids, never stop early)",
    )
    return p


def verified_cell(manifest_path: Path, cell_id: str) -> Path:
    """The artifact folder of ``cell_id``, after checking it against the manifest's content hash.

    The hash is the build cache's (``store.content_hash``): every file of the folder, by
    relative path, size and bytes, then the cache entry's metadata. A mismatch raises IntegrityError.
    """
    from .store import ENTRY_FILE, content_hash

    manifest_path = Path(manifest_path)
    manifest = load_json(manifest_path, hint="pass <build_dir>/manifest.json")
    cells = manifest.get("cells") if isinstance(manifest, dict) else None
    if not isinstance(cells, dict):
        raise InputError(
            f"{manifest_path}: not an rbln-build manifest (no 'cells' mapping); pass <build_dir>/manifest.json."
        )
    if cell_id not in cells or not isinstance(cells[cell_id], dict):
        raise UserError(
            f"{manifest_path}: no cell {cell_id!r}; the manifest has {len(cells)} cell(s), "
            f"e.g. {', '.join(sorted(cells)[:3])}."
        )
    artifact = cells[cell_id].get("artifact")
    if not isinstance(artifact, dict) or not isinstance(artifact.get("path"), str):
        raise UserError(f"{manifest_path}: cell {cell_id!r} has no artifact (status {cells[cell_id].get('status')!r}).")
    try:
        folder = (manifest_path.parent / str(artifact["path"])).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python 3.11)
        raise InputError(f"{manifest_path}: cell {cell_id!r}'s artifact path cannot be resolved ({exc}).") from None
    entry_file = folder.parent / ENTRY_FILE
    try:
        meta = load_json(entry_file)["meta"]
        actual = content_hash(folder, meta)
    except (UserError, OSError, KeyError, TypeError, ValueError) as exc:
        raise IntegrityError(f"{entry_file}: unreadable cache entry of cell {cell_id!r} ({exc}); rebuild it.") from None
    if actual != artifact.get("content_hash"):
        raise IntegrityError(
            f"{folder}: content hash {actual} does not match {artifact.get('content_hash')} recorded for cell "
            f"{cell_id!r} in {manifest_path}; the artifact was changed after the build. Refusing to load it: "
            "rebuild the cell (rbln-build) or restore it."
        )
    return folder


def released_cell(folder: Path) -> None:
    """A released cell checked before anything in it is read (``release.check_released_cell``)."""
    from .release import check_released_cell

    check_released_cell(folder)


def _text_side(folder: Path) -> tuple[Any, list[int]]:
    """The cell's tokenizer (its own files, no hub) and the eos ids of its generation config."""
    from .backends import read_record

    record = read_record(folder)
    if not record.get("tokenizer"):
        raise UserError(
            f'{folder}: this cell carries no tokenizer (rbln-build.json: "tokenizer": null; its recipe names '
            "none); pass token ids with --prompt-ids, or add the checkpoint's tokenizer files to the recipe "
            "(tokenizer: {files: [...]}) and rebuild."
        )
    from .memory import verify_data_files

    verify_data_files(folder, record)  # the files the tokenizer and the eos ids come from, before they load
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise UserError(f"{folder}: its tokenizer files do not load ({exc}); rebuild the cell.") from None
    eos: list[int] = []
    if record.get("generation_config"):
        value = _read_generation_eos(folder / str(record["generation_config"]))
        eos = [value] if isinstance(value, int) else list(value or [])
    return tokenizer, eos


def _chat_prompts(tokenizer: Any, questions: list[str], folder: Path) -> list[list[int]]:
    """Each question as one user message through the cell's chat template, with the generation prompt."""
    if not getattr(tokenizer, "chat_template", None):
        raise UserError(
            f"{folder}: this cell's tokenizer has no chat template (no chat_template in tokenizer_config.json, "
            "no chat_template.jinja); --chat needs one. Pass the text as it is with --prompt."
        )
    prompts = []
    for question in questions:
        try:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
            )
        except Exception as exc:  # jinja's TemplateError and what a template raises itself
            raise UserError(
                f"{folder}: the cell's chat template fails on this question ({type(exc).__name__}: {exc}); "
                "pass the text with --prompt instead."
            ) from None
        # The template writes the special tokens itself (as transformers' apply_chat_template(tokenize=True)).
        prompts.append(list(tokenizer(text, add_special_tokens=False)["input_ids"]))
    return prompts


def _read_generation_eos(path: Path) -> Any:
    try:
        value = load_json(path).get("eos_token_id")
    except (UserError, AttributeError) as exc:
        raise UserError(f"{path}: unreadable generation config ({exc}); rebuild the cell.") from None
    if value is not None and not (
        isinstance(value, int) or (isinstance(value, list) and all(isinstance(v, int) for v in value))
    ):
        raise UserError(f"{path}: eos_token_id must be an id or a list of ids, got {value!r}.")
    return value


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        folder = Path(args.artifact)
        if args.manifest is not None:
            folder = verified_cell(Path(args.manifest), args.artifact)
        else:
            released_cell(folder)
            try:
                folder.stat()
            except NotADirectoryError:  # a path through a file (afile/x); other errors the loader names
                raise UserError(
                    f"{folder}: not a cell folder (a part of it is a file); "
                    "pass <build_dir>/artifacts/<cell id> or <release>/<cell id>."
                ) from None
            except OSError:
                pass
        from .backends.torch._runtime import load_artifact

        artifact = load_artifact(folder)  # verifies the program first
        if args.prompt is not None or args.chat is not None:
            tokenizer, eos = _text_side(folder)
            if args.chat is not None:
                prompts = _chat_prompts(tokenizer, args.chat, folder)
            else:
                prompts = [list(tokenizer(text)["input_ids"]) for text in args.prompt]
            stop = eos if args.eos_token_id is None else args.eos_token_id
            tokens = artifact.generate(prompts, args.max_new_tokens, eos_token_id=stop)
            for ids in tokens:
                print(tokenizer.decode(ids, skip_special_tokens=True))
            return 0
        tokens = artifact.generate(args.prompt_ids, args.max_new_tokens, eos_token_id=args.eos_token_id)
    except RblnBuildError as exc:
        if os.environ.get("RBLN_BUILD_FULL_ERROR") == "1":
            raise
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug: one line, the traceback in a file
        if os.environ.get("RBLN_BUILD_FULL_ERROR") == "1":
            raise
        from .commands import report_internal

        print(report_internal(exc, None), file=sys.stderr)
        return 3
    for i, ids in enumerate(tokens):
        print(f"prompt {i}: {','.join(str(t) for t in ids)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
