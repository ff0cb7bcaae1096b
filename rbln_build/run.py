"""Generate greedy tokens from a ``torch`` cell artifact on CPU.

    python -m rbln_build.run ARTIFACT --prompt-ids 1,2,3 [--prompt-ids 4,5] --max-new-tokens 8
    python -m rbln_build.run --manifest build/manifest.json CELL_ID --prompt-ids 1,2,3

Prints one line per prompt: ``prompt <i>: <comma-separated new token ids>``. Artifacts are code, so
nothing is loaded before it is verified: the program's sha256 against the cell's rbln-build.json
and its archive against the pickle allowlist (``backends.torch._archive``); with ``--manifest``,
first the whole cell folder against the manifest's ``artifact.content_hash``, so rewriting
rbln-build.json together with the program is caught too. Errors (a missing artifact, a failed
check, a plan instead of a program, a request bigger than the KV pool) print one line to stderr and
exit with status 2; ``RBLN_BUILD_FULL_ERROR=1`` shows the traceback. docs/security.md says what is
and is not verified.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ._documents import load_json
from .errors import InputError, IntegrityError, RblnBuildError, UserError

__all__ = ["main", "verified_cell"]


def _token_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,2,3, got {text!r}") from None
    if not ids:
        raise argparse.ArgumentTypeError("a prompt needs at least one token id")
    return ids


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m rbln_build.run",
        description=(
            "Load a cell artifact built by the 'torch' backend (a folder with program.pt2, "
            "rbln-build.json and config.json), verify it, and print greedy tokens for a batch of prompts. "
            "The KV-cache pool has exactly the artifact's kvcache_num_blocks blocks, shared by the batch."
        ),
        epilog="examples: python -m rbln_build.run build/artifacts/tiny_llama.atom_max.b0.3 "
        "--prompt-ids 1,2,3 --prompt-ids 4,5 --max-new-tokens 8\n"
        "          python -m rbln_build.run --manifest build/manifest.json tiny_llama.atom_max.b0.3 --prompt-ids 1,2,3",
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
    p.add_argument(
        "--prompt-ids",
        type=_token_ids,
        action="append",
        required=True,
        metavar="IDS",
        help="comma-separated token ids of one prompt; repeat for a batch (at most the artifact's batch_size)",
    )
    p.add_argument(
        "--max-new-tokens", type=int, default=8, metavar="N", help="tokens to generate per prompt (default 8)"
    )
    p.add_argument(
        "--eos-token-id",
        type=int,
        default=None,
        metavar="ID",
        help="stop a prompt early when it generates this id (default: never stop early)",
    )
    return p


def verified_cell(manifest_path: Path, cell_id: str) -> Path:
    """The artifact folder of ``cell_id``, after checking it against the manifest's content hash.

    The hash is the build cache's (``store._store.content_hash``): every file of the folder, by
    relative path, size and bytes, then the cache entry's metadata. A mismatch raises IntegrityError.
    """
    from .store._store import ENTRY_FILE, content_hash

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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        folder = Path(args.artifact)
        if args.manifest is not None:
            folder = verified_cell(Path(args.manifest), args.artifact)
        from .backends.torch._runtime import load_artifact

        artifact = load_artifact(folder)
        tokens = artifact.generate(args.prompt_ids, args.max_new_tokens, eos_token_id=args.eos_token_id)
    except RblnBuildError as exc:
        if os.environ.get("RBLN_BUILD_FULL_ERROR") == "1":
            raise
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug: one line, the traceback in a file
        if os.environ.get("RBLN_BUILD_FULL_ERROR") == "1":
            raise
        from .commands._guard import report_internal

        print(report_internal(exc, None), file=sys.stderr)
        return 3
    for i, ids in enumerate(tokens):
        print(f"prompt {i}: {','.join(str(t) for t in ids)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
