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
import json
import os
import sys
from pathlib import Path

from .errors import IntegrityError, RblnBuildError, UserError

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
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        cells = manifest["cells"]
    except OSError as exc:
        raise UserError(f"{manifest_path}: cannot read ({exc.strerror}); pass <build_dir>/manifest.json.") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{manifest_path}: not an rbln-build manifest ({exc}).") from None
    if not isinstance(cells, dict) or cell_id not in cells:
        raise UserError(
            f"{manifest_path}: no cell {cell_id!r}; the manifest has {len(cells)} cell(s), "
            f"e.g. {', '.join(sorted(cells)[:3])}."
        )
    artifact = cells[cell_id].get("artifact")
    if not isinstance(artifact, dict) or not isinstance(artifact.get("path"), str):
        raise UserError(f"{manifest_path}: cell {cell_id!r} has no artifact (status {cells[cell_id].get('status')!r}).")
    folder = (manifest_path.parent / str(artifact["path"])).resolve()
    entry_file = folder.parent / ENTRY_FILE
    try:
        meta = json.loads(entry_file.read_text(encoding="utf-8"))["meta"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise IntegrityError(f"{entry_file}: unreadable cache entry of cell {cell_id!r} ({exc}); rebuild it.") from None
    actual = content_hash(folder, meta)
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
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for i, ids in enumerate(tokens):
        print(f"prompt {i}: {','.join(str(t) for t in ids)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
