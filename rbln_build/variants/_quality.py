"""A quantized variant's quality, measured on CPU against its float weights.

Two figures, both computed through the paged program interface of the torch backend
(``logits = program(input_ids, cache_position, block_table, key_positions, *kv_pools)``):

* **perplexity** on the shipped text (``_text.TEXT``, tokenized with the recipe's own
  ``tokenizer.json``): the text's tokens cut into rows of ``window`` tokens (the cell's
  ``max_seq_len``, at most ``MAX_WINDOW``; the text's first ``MAX_TOKENS``), each row fed one token at a time from position 0
  (teacher forcing), ``exp`` of the mean negative log-likelihood of every next token. Once for the
  variant, once for the float weights: ``perplexity_increase`` is their ratio minus 1.
  The rows of a group (at most the cell's ``batch_size``) go through the program together, one call
  per position (the runtime serves one sequence per call: a batched call may round the last bits of a
  logit differently; both sides are measured alike, and a call per row would cost ``batch_size`` x).
* **greedy agreement** on the fixed prompts (``_text.PROMPTS``): ``GREEDY_TOKENS`` greedy tokens per
  prompt from each; the share of tokens the variant produces identical to the float ones before its
  first difference (1.0: every prompt's continuation is the same).

The variant's side is the cell's CPU program (the exported ``program.pt2`` of a torch cell); the float
side is the float model in the same paged wrapper the float cell's program is exported from. Every
pool is this module's own, zeroed, so the figure depends on the weights alone (not on a cell's budget).
A recipe without a tokenizer has no figure (``measured: false`` and the reason).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..quantization import PROMPTS, TEXT, TEXT_VERSION

if TYPE_CHECKING:
    import torch

__all__ = [
    "measure",
    "unmeasured",
    "inputs",
    "side",
    "compare",
    "Inputs",
    "GREEDY_TOKENS",
    "MAX_WINDOW",
    "MAX_TOKENS",
    "gate_problem",
]

GREEDY_TOKENS = 16
MAX_WINDOW = 512
MAX_TOKENS = 2048  # of the text: a few thousand tokens at most, one program call per token and row
NO_TOKENIZER = "the recipe has no tokenizer.json: the shipped text cannot be tokenized"
Step = Callable[..., "torch.Tensor"]  # the paged program: (ids, positions, block table, *pools) -> logits


def unmeasured(reason: str) -> dict[str, Any]:
    return {"measured": False, "reason": reason}


def _tokenizer(recipe_dir: Path, files: Sequence[str] | None) -> Any:
    from tokenizers import Tokenizer  # type: ignore[import-untyped]

    if not files or "tokenizer.json" not in files:
        return None
    return Tokenizer.from_file(str(recipe_dir / "tokenizer.json"))


class _Runner:
    """Feeds rows of tokens through ``step`` over fresh pools, one position at a time."""

    def __init__(self, step: Step, pools: Callable[[int], list[torch.Tensor]], block_size: int, width: int) -> None:
        self.step, self.pools, self.block_size, self.width = step, pools, block_size, width

    def run(self, rows: list[list[int]], feed: Callable[[int, int, torch.Tensor], int | None]) -> None:
        """Position by position: row r's token at t is ``rows[r][t]`` if known, else what ``feed``
        returned for it (``feed(r, t, logits_row)`` sees the logits after position t)."""
        import torch

        per_row = -(-self.width // self.block_size)
        pools = self.pools(per_row * len(rows))
        table = torch.tensor([[r * per_row + i for i in range(per_row)] for r in range(len(rows))], dtype=torch.long)
        tokens = [list(r) for r in rows]
        with torch.no_grad():
            for t in range(self.width - 1):
                live = [r for r in range(len(rows)) if t < len(tokens[r])]
                if not live:
                    return
                keys = torch.arange(t + 1, dtype=torch.long)  # the keys a row at position t attends to
                logits = self.step(  # every live row of the group in one call (B rows, T = 1)
                    torch.tensor([[tokens[r][t]] for r in live], dtype=torch.long),
                    torch.full((len(live), 1), t, dtype=torch.long),
                    table[live],
                    keys,
                    *pools,
                )
                for i, r in enumerate(live):
                    nxt = feed(r, t, logits[i])
                    if nxt is not None and len(tokens[r]) == t + 1:
                        tokens[r].append(nxt)


def _perplexity(runner: _Runner, rows: list[list[int]]) -> float:
    import torch

    total, count = 0.0, 0

    def feed(r: int, t: int, logits: torch.Tensor) -> None:
        nonlocal total, count
        if t + 1 < len(rows[r]):
            total -= float(torch.log_softmax(logits.to(torch.float64), -1)[rows[r][t + 1]])
            count += 1

    runner.run(rows, feed)
    return math.exp(total / count)


def _greedy(runner: _Runner, prompts: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in prompts]

    def feed(r: int, t: int, logits: Any) -> int | None:
        if t + 1 >= len(prompts[r]) and len(out[r]) < GREEDY_TOKENS:
            out[r].append(int(logits.argmax()))
            return out[r][-1]
        return None

    runner.run(prompts, feed)
    return out


@dataclass(frozen=True)
class Inputs:
    """What both sides are fed: the text's rows and the prompts, as token ids of the recipe's tokenizer."""

    rows: list[list[int]]
    prompts: list[list[int]]
    text_tokens: int
    window: int


def inputs(recipe_dir: Path, tokenizer_files: Sequence[str] | None, max_seq_len: int) -> Inputs | None:
    """The shipped text and prompts tokenized for a cell of ``max_seq_len``; None without a tokenizer."""
    tokenizer = _tokenizer(recipe_dir, tokenizer_files)
    if tokenizer is None:
        return None
    window = min(max_seq_len, MAX_WINDOW)
    ids = tokenizer.encode(TEXT).ids[:MAX_TOKENS]
    rows = [ids[i : i + window] for i in range(0, len(ids), window)]
    prompts = [tokenizer.encode(p).ids[: window - GREEDY_TOKENS] for p in PROMPTS]
    return Inputs([r for r in rows if len(r) > 1], prompts, len(ids), window)


def side(
    step: Step, pools: Callable[[int], list[torch.Tensor]], fed: Inputs, *, block_size: int, batch_size: int
) -> dict[str, Any]:
    """One side's figures: ``perplexity`` on the text and its ``greedy`` tokens for each prompt (JSON)."""
    runner = _Runner(step, pools, block_size, fed.window)
    total = 0.0
    scored = 0
    for i in range(0, len(fed.rows), batch_size):  # at most batch_size rows at once, as the program allows
        group = fed.rows[i : i + batch_size]
        n = sum(len(r) - 1 for r in group)
        total += math.log(_perplexity(runner, group)) * n
        scored += n
    greedy = [
        t for i in range(0, len(fed.prompts), batch_size) for t in _greedy(runner, fed.prompts[i : i + batch_size])
    ]
    return {"perplexity": math.exp(total / scored), "greedy": greedy}


def compare(variant: dict[str, Any], reference: dict[str, Any], fed: Inputs) -> dict[str, Any]:
    """The quality record of a variant's ``side`` against the float weights' ``side``."""
    same = 0
    for a, b in zip(variant["greedy"], reference["greedy"], strict=True):
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            same += 1
    produced = sum(len(b) for b in reference["greedy"])
    return {
        "measured": True,
        "text": TEXT_VERSION,
        "text_tokens": fed.text_tokens,
        "window": fed.window,
        "perplexity": round(variant["perplexity"], 6),
        "float_perplexity": round(reference["perplexity"], 6),
        "perplexity_increase": round(variant["perplexity"] / reference["perplexity"] - 1.0, 6),
        "greedy_agreement": round(same / produced, 6),
        "greedy_tokens": produced,
    }


def measure(
    variant: Step,
    reference: Step,
    pools: Callable[[int], list[torch.Tensor]],
    *,
    recipe_dir: Path,
    tokenizer_files: Sequence[str] | None,
    max_seq_len: int,
    block_size: int,
    batch_size: int,
) -> dict[str, Any]:
    """The figures of ``variant`` against ``reference`` (both paged programs of one geometry), both
    measured here (``_stage.measure_variant`` measures the float side once per text and geometry)."""
    fed = inputs(recipe_dir, tokenizer_files, max_seq_len)
    if fed is None:
        return unmeasured(NO_TOKENIZER)
    sides = [side(s, pools, fed, block_size=block_size, batch_size=batch_size) for s in (variant, reference)]
    return compare(sides[0], sides[1], fed)


def gate_problem(quality: dict[str, Any] | None, gate: Sequence[tuple[str, float]] | None) -> str | None:
    """Why a cell fails its quality gate (``matrix.max_perplexity_increase``, ``matrix.min_greedy_agreement``),
    or None. A figure that could not be measured fails a gate too: a gate is a promise about the cell."""
    if not gate:
        return None
    limits = dict(gate)
    if not quality or not quality.get("measured"):
        why = (quality or {}).get("reason", "no figure")
        return f"quality gate {limits}: the cell's quality could not be measured ({why})"
    figures = (
        f"perplexity {quality['perplexity']} against the float weights' {quality['float_perplexity']} "
        f"({float(quality['perplexity_increase']):+.2%}), greedy agreement {float(quality['greedy_agreement']):.2%} "
        f"of {quality['greedy_tokens']} tokens"
    )
    over = []
    most = limits.get("max_perplexity_increase")
    if most is not None and float(quality["perplexity_increase"]) > most:
        over.append(f"perplexity increase over matrix.max_perplexity_increase {most:.2%}")
    least = limits.get("min_greedy_agreement")
    if least is not None and float(quality["greedy_agreement"]) < least:
        over.append(f"greedy agreement under matrix.min_greedy_agreement {least:.2%}")
    if not over:
        return None
    return f"quality gate: {figures}: {' and '.join(over)}; use a finer variant or relax the gate"
