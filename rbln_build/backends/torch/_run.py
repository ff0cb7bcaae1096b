"""Generate greedy tokens from a ``torch`` cell artifact on CPU.

    python -m rbln_build.run ARTIFACT --prompt-ids 1,2,3 [--prompt-ids 4,5] --max-new-tokens 8

Prints one line per prompt: ``prompt <i>: <comma-separated new token ids>``. Errors (a missing
artifact, a plan instead of a program, a request bigger than the KV pool) print one line to
stderr and exit with status 2; ``RBLN_BUILD_FULL_ERROR=1`` shows the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from ...errors import RblnBuildError

__all__ = ["main"]


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
            "rbln_config.json and config.json) and print greedy tokens for a batch of prompts. "
            "The KV-cache pool has exactly the artifact's kvcache_num_blocks blocks, shared by the batch."
        ),
        epilog="example: python -m rbln_build.run build/cells/tiny_llama-atom_max-0.3 "
        "--prompt-ids 1,2,3 --prompt-ids 4,5 --max-new-tokens 8",
    )
    p.add_argument("artifact", metavar="ARTIFACT", help="cell artifact folder")
    p.add_argument(
        "--prompt-ids", type=_token_ids, action="append", required=True, metavar="IDS",
        help="comma-separated token ids of one prompt; repeat for a batch (at most the artifact's batch_size)",
    )
    p.add_argument("--max-new-tokens", type=int, default=8, metavar="N", help="tokens to generate per prompt (default 8)")
    p.add_argument("--eos-token-id", type=int, default=None, metavar="ID",
                   help="stop a prompt early when it generates this id (default: never stop early)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        from ._runtime import load_artifact

        artifact = load_artifact(args.artifact)
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
