"""Run a ``torch`` backend cell artifact on CPU: greedy generation over a paged KV cache.

    artifact = load_artifact("build/cells/<id>")     # needs only the artifact folder
    artifact.generate([[1, 2, 3], [4, 5]], max_new_tokens=8)   -> [[...8 ids], [...8 ids]]

The KV pool has exactly ``kvcache_num_blocks`` blocks (from the artifact's rbln-build.json).
Artifacts are code: the program's sha256 (recorded in rbln-build.json) is checked, its archive is
checked for anything torch would unpickle (``_archive``) or evaluate (``_graph``), and the whole
record against its bounds and the program's own inputs (``_cellrecord``), before torch sees a byte
of it; the bytes that were checked are the bytes that are loaded.
Blocks are handed out as optimum-rbln's page table does: one free list shared by the whole batch,
a block taken when a sequence first writes into it, all of a sequence's blocks returned when it
is done. A pool smaller than the full pool therefore serves a batch whose sequences are short.
A request that could run out of blocks is refused before any compute with
``RuntimeLimitError``, instead of failing half-way or overwriting another sequence's cache.
The program is called as transformers' ``generate`` runs one prompt (the whole prompt in one call,
then one token per call, one sequence at a time, over exactly its keys), so the tokens are its
greedy tokens in bfloat16 too (docs/backends.md, "Exactness").
"""

from __future__ import annotations

import io
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..._documents import absent, parse_json, read_document
from ...errors import BuildError, IntegrityError, RuntimeLimitError, UserError
from ...estimator import LIMITS
from .._record import RECORD_FILE, read_record, verify_programs
from ._archive import check_program_archive
from ._cellrecord import check_cell_record, graph_of

__all__ = ["Artifact", "PageTable", "load_artifact"]


class PageTable:
    """Per-sequence block tables over one shared free list of ``num_blocks`` pool blocks."""

    def __init__(self, num_blocks: int, block_size: int, batch_size: int) -> None:
        self.block_size = block_size
        self.free: deque[int] = deque(range(num_blocks))
        self.tables: list[list[int]] = [[] for _ in range(batch_size)]

    def ensure(self, row: int, last_position: int) -> None:
        """Make sure ``row`` owns the blocks for positions ``0 .. last_position``."""
        table = self.tables[row]
        while len(table) <= last_position // self.block_size:
            if not self.free:  # the up-front check in Artifact.generate makes this unreachable
                raise RuntimeLimitError(
                    f"KV-cache pool exhausted while sequence {row} reached position {last_position}."
                )
            table.append(self.free.popleft())

    def release(self, row: int) -> None:
        self.free.extend(self.tables[row])
        self.tables[row] = []

    def tensor(self, rows: Sequence[int]) -> torch.Tensor:
        """``[len(rows), W]`` block table; short rows are padded with their first block (masked out)."""
        width = max(len(self.tables[r]) for r in rows)
        return torch.tensor(
            [self.tables[r] + [self.tables[r][0]] * (width - len(self.tables[r])) for r in rows], dtype=torch.long
        )


@dataclass
class Artifact:
    path: Path
    config: dict[str, Any]
    pools: list[torch.Tensor]
    program_file: str = "program.pt2"
    _verified: bytes = field(default=b"", repr=False)  # the checked program bytes, until loaded
    _program: Any = None

    @property
    def program(self) -> Any:
        """The exported program as a callable module, loaded on first use (requests are checked first)."""
        if self._program is None:
            self._program = _load_program(self.path / self.program_file, self._verified)
            self._verified = b""
        return self._program

    @property
    def num_blocks(self) -> int:
        return int(self.pools[0].shape[0])

    @property
    def block_size(self) -> int:
        return int(self.config["kvcache_block_size"])

    def blocks_needed(self, prompt_len: int, max_new_tokens: int) -> int:
        # The last generated token is returned, never written: prompt_len + max_new - 1 positions.
        return math.ceil((prompt_len + max_new_tokens - 1) / self.block_size)

    def check_request(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> None:
        cfg = self.config
        if not prompts:
            raise UserError("generate: no prompts; pass at least one list of token ids.")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise UserError(f"generate: max_new_tokens must be a positive integer, got {max_new_tokens!r}.")
        vocab = int(self.config.get("vocab_size") or 0)
        for i, p in enumerate(prompts):
            if not p:
                raise UserError(f"generate: prompt {i} is empty; give it at least one token id.")
            bad = [t for t in p if not isinstance(t, int) or t < 0 or (vocab and t >= vocab)]
            if bad:
                raise UserError(f"generate: prompt {i} has token ids outside 0..{vocab - 1}: {bad[:5]}.")
        if len(prompts) > cfg["batch_size"]:
            raise RuntimeLimitError(
                f"{len(prompts)} prompts, but the artifact was compiled for batch_size {cfg['batch_size']}; "
                f"send at most {cfg['batch_size']} prompts at a time."
            )
        for i, p in enumerate(prompts):
            if len(p) + max_new_tokens > cfg["max_seq_len"]:
                raise RuntimeLimitError(
                    f"prompt {i} has {len(p)} tokens + {max_new_tokens} new tokens = {len(p) + max_new_tokens}, "
                    f"more than max_seq_len {cfg['max_seq_len']}; shorten the prompt or lower --max-new-tokens."
                )
        per_row = [self.blocks_needed(len(p), max_new_tokens) for p in prompts]
        if sum(per_row) > self.num_blocks:
            rows = ", ".join(f"prompt {i}: {n}" for i, n in enumerate(per_row))
            raise RuntimeLimitError(
                f"this request needs {sum(per_row)} KV-cache blocks of {self.block_size} tokens ({rows}), "
                f"but the artifact's pool has {self.num_blocks} (kvcache_num_blocks in {self.path.name}/{RECORD_FILE}). "
                "Send fewer prompts at once, shorten them or lower --max-new-tokens, "
                "or rebuild the cell with a larger memory budget."
            )

    def _step(self, ids: list[int], start: int, table: torch.Tensor) -> torch.Tensor:
        """One forward of one sequence: ``ids`` at positions ``start ..``, over keys ``0 .. start + len(ids) - 1``."""
        end = start + len(ids)
        return self.program(
            torch.tensor([ids], dtype=torch.long),
            torch.arange(start, end, dtype=torch.long)[None, :],
            table,
            torch.arange(end, dtype=torch.long),
            *self.pools,
        )

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, eos_token_id: int | Sequence[int] | None = None
    ) -> list[list[int]]:
        """Greedy tokens for each prompt (at most ``max_new_tokens``; fewer if one of ``eos_token_id``
        (an id or several, as a generation config has them) ends it)."""
        self.check_request(prompts, max_new_tokens)
        stops = (
            set() if eos_token_id is None else {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id)
        )
        pages = PageTable(self.num_blocks, self.block_size, len(prompts))
        out: list[list[int]] = [[] for _ in prompts]
        # transformers' greedy generate, one prompt at a time: the whole prompt in one forward, then one
        # token per forward, each over exactly the keys the sequence has. The same calls here give the
        # same tokens in bf16 too: a CPU matmul's rounding depends on its row count (a batch of rows, a
        # chunk of a prompt) and attention's on its key count, so neither is batched nor padded.
        for row, prompt in enumerate(prompts):
            pages.ensure(row, len(prompt) - 1)
            logits = self._step(list(prompt), 0, pages.tensor([row]))
            out[row].append(int(logits.argmax(-1)[0]))
            length = len(prompt)
            while len(out[row]) < max_new_tokens and out[row][-1] not in stops:
                pages.ensure(row, length)
                logits = self._step([out[row][-1]], length, pages.tensor([row]))
                length += 1
                out[row].append(int(logits.argmax(-1)[0]))
            pages.release(row)
        return out


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON document of the cell, read bounded (a FIFO, a device or deep nesting is refused)."""
    if absent(path, error=UserError):
        raise UserError(f"{path}: cannot read (No such file or directory); is this a cell artifact folder?")
    value = parse_json(read_document(path, error=BuildError, hint="rebuild the cell"), str(path), error=BuildError)
    if not isinstance(value, dict):
        raise BuildError(f"{path}: expected a JSON object; rebuild the cell.")
    return value


def load_artifact(path: str | Path) -> Artifact:
    """Load a cell artifact folder; its pool is allocated with exactly ``kvcache_num_blocks`` blocks.

    The program is verified here, before anything else happens: its sha256 against rbln-build.json
    and its archive against the pickle allowlist. Either failing raises IntegrityError."""
    path = Path(path)
    try:
        folder = path.is_dir()
    except OSError as exc:  # a name too long for the file system, a path it refuses: not a folder
        raise UserError(
            f"{path}: cannot be opened as a folder ({exc.strerror}); pass a cell artifact folder (it holds {RECORD_FILE})."
        ) from None
    if not folder:
        raise UserError(f"{path}: not a directory; pass a cell artifact folder (it holds {RECORD_FILE}).")
    cfg = read_record(path)
    if cfg["artifact"] == "plan":
        raise UserError(
            f"{path}: this cell is a resolved plan, not a compiled program (the recipe has no weights); "
            "set weights in the recipe to build a program that can run."
        )
    if cfg["artifact"] != "program":
        raise UserError(
            f"{path}: this cell holds models compiled for a Rebellions NPU ({cfg['artifact']!r}, target "
            f"{cfg.get('npu')}); load it with optimum-rbln (RBLNAutoModelForCausalLM.from_pretrained) on an NPU host."
        )
    if list(cfg["programs"]) != ["program.pt2"]:
        raise IntegrityError(
            f"{path / RECORD_FILE}: programs must name exactly program.pt2, got {sorted(cfg['programs'])[:3]}; "
            "not a torch artifact. Rebuild the cell."
        )
    [(program_file, data)] = verify_programs(path, cfg, keep=True).items()
    check_program_archive(data, path / program_file)
    check_cell_record(cfg, path / RECORD_FILE, graph_of(data))  # bounds, and the pool the program takes
    hf = _read_json(path / "config.json")
    pool, num_blocks = cfg["kv_pool"], cfg["kvcache_num_blocks"]
    dtype = getattr(torch, pool["dtype"])
    shape = (num_blocks, pool["kv_heads"], pool["block_size"], pool["head_dim"])
    pools = [torch.zeros(shape, dtype=dtype) for _ in range(2 * pool["num_layers"])]
    cfg = dict(cfg, vocab_size=_vocab_size(hf, path / "config.json"))
    return Artifact(path=path, config=cfg, pools=pools, program_file=program_file, _verified=data)


def _load_program(program_file: Path, data: bytes) -> Any:
    if not data:  # loaded once; a second load would have to verify again
        raise BuildError(f"{program_file}: the verified program bytes were already consumed; load the artifact again.")
    try:
        return torch.export.load(io.BytesIO(data)).module()
    except Exception as exc:  # a truncated or foreign file: torch raises many types here
        raise BuildError(
            f"{program_file}: cannot load the exported program ({type(exc).__name__}: {exc}); rebuild the cell."
        ) from exc


def _vocab_size(hf: dict[str, Any], where: Path) -> int:
    text = hf.get("text_config") if isinstance(hf.get("text_config"), dict) else hf
    vocab = text.get("vocab_size")
    if type(vocab) is not int or not 1 <= vocab <= LIMITS["vocab_size"]:
        raise IntegrityError(
            f"{where}: vocab_size is {vocab!r}; expected an integer from 1 to {LIMITS['vocab_size']:,}. "
            "Rebuild the cell or restore the file."
        )
    return vocab
