"""Cell artifacts run on CPU: exactly HF's greedy tokens from a pool smaller than the full pool,
blocks shared across the batch, clear errors for requests the pool cannot hold, a small CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from _torch_cells import compiled, finalized  # noqa: E402

from rbln_build.backends.torch._runtime import PageTable, load_artifact  # noqa: E402
from rbln_build.backends.torch._weights import build_model  # noqa: E402
from rbln_build.errors import RuntimeLimitError, UserError  # noqa: E402
from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR, load_recipe  # noqa: E402

REPO = DEFAULT_RECIPES_DIR.parent
PROMPTS = [[5, 6, 7, 8, 9], [100, 3, 200, 9, 11, 12, 13, 14, 15, 16, 17, 18, 19]]


def hf_greedy(model, prompt: list[int], new: int) -> list[int]:
    out = model.generate(torch.tensor([prompt]), max_new_tokens=new, do_sample=False, eos_token_id=None)
    return out[0, len(prompt) :].tolist()


@pytest.fixture(scope="module", params=["tiny_llama", "tiny_qwen3"])
def small_pool(request):
    """(recipe name, artifact built at a budget below the full pool, HF reference model, its blocks).

    The budget is the smallest one that clears the floor (the estimator's own answer), so the
    count comes from a budget through the estimator, exactly as a matrix cell gets it.
    """
    from rbln_build.estimator import Request, estimate

    name = request.param
    c = compiled(name)
    att = c.spec.attention

    def ask(budget: object) -> Request:
        return Request.for_attention(c.spec.npu.name, c.spec.num_devices, att, memory_budget=budget)

    floor_budget = estimate(ask(None), c.result.report).breakdown.budget_for_floor.bytes
    resolution = estimate(ask(floor_budget), c.result.report)
    n = resolution.kvcache_num_blocks
    assert att.num_min_blocks <= n < att.num_full_blocks, (name, n)
    return name, load_artifact(finalized(name, n)), build_model(load_recipe(name)), n


def test_small_pool_generates_exactly_hf_greedy_tokens(small_pool) -> None:
    name, artifact, reference, _ = small_pool
    got = artifact.generate(PROMPTS, max_new_tokens=16)
    assert [len(g) for g in got] == [16, 16]
    for prompt, tokens in zip(PROMPTS, got, strict=True):
        assert tokens == hf_greedy(reference, prompt, 16), name


def test_the_pool_has_exactly_kvcache_num_blocks(small_pool) -> None:
    name, artifact, _, n = small_pool
    cfg = json.loads((artifact.path / "rbln-build.json").read_text())
    assert cfg["kvcache_num_blocks"] == n
    assert artifact.num_blocks == n
    assert {tuple(p.shape) for p in artifact.pools} == {(n, cfg["kv_pool"]["kv_heads"], 1024, 32)}
    assert len(artifact.pools) == 2 * cfg["kv_pool"]["num_layers"]
    full = compiled(name).spec.attention.num_full_blocks
    assert load_artifact(finalized(name, full)).num_blocks == full


def test_a_request_bigger_than_the_pool_is_a_clear_error(small_pool) -> None:
    _, artifact, _, n = small_pool
    per_prompt = n // 2 + 1  # two prompts of this many blocks each need more than the pool
    long = [7] * ((per_prompt - 1) * 1024 + 1)  # + 8 new tokens - 1: just over per_prompt - 1 blocks
    with pytest.raises(RuntimeLimitError) as info:
        artifact.generate([long, long], max_new_tokens=8)
    msg = str(info.value)
    need = 2 * per_prompt
    assert f"needs {need} KV-cache blocks of 1024 tokens (prompt 0: {per_prompt}, prompt 1: {per_prompt})" in msg
    assert f"pool has {n} (kvcache_num_blocks" in msg
    assert "larger memory budget" in msg


def test_batch_and_length_limits(small_pool) -> None:
    name, artifact, _, _ = small_pool
    max_seq_len = compiled(name).spec.attention.max_seq_len
    with pytest.raises(RuntimeLimitError, match="compiled for batch_size 2"):
        artifact.generate([[1], [2], [3]], max_new_tokens=2)
    with pytest.raises(RuntimeLimitError, match=f"more than max_seq_len {max_seq_len}"):
        artifact.generate([[1] * (max_seq_len - 6)], max_new_tokens=8)
    with pytest.raises(UserError, match="prompt 1 is empty"):
        artifact.generate([[1], []], max_new_tokens=2)
    with pytest.raises(UserError, match="outside 0"):
        artifact.generate([[1, 10**6]], max_new_tokens=2)


def test_eos_ends_one_row_and_the_other_continues(small_pool) -> None:
    _, artifact, reference, _ = small_pool
    first = hf_greedy(reference, PROMPTS[0], 1)[0]
    full = hf_greedy(reference, PROMPTS[1], 6)
    got = artifact.generate(PROMPTS, max_new_tokens=6, eos_token_id=first)
    assert got[0] == [first]
    cut = full.index(first) + 1 if first in full else len(full)
    assert got[1] == full[:cut]


@pytest.mark.slow
def test_blocks_are_shared_across_the_batch() -> None:
    # 5 blocks for a batch of 2: a fixed split would give each row 2. Row 0 takes 3 blocks
    # (2100 prompt tokens), row 1 takes 1, and the tokens are still exactly HF's.
    artifact = load_artifact(finalized("tiny_llama", 5))
    reference = build_model(load_recipe("tiny_llama"))
    long = [(i * 37) % 500 + 1 for i in range(2100)]
    got = artifact.generate([long, PROMPTS[0]], max_new_tokens=16)
    assert got == [hf_greedy(reference, long, 16), hf_greedy(reference, PROMPTS[0], 16)]


def test_page_table_shares_one_free_list() -> None:
    pages = PageTable(num_blocks=3, block_size=4, batch_size=2)
    pages.ensure(0, 7)  # positions 0..7: two blocks
    pages.ensure(1, 0)
    assert pages.tables == [[0, 1], [2]]
    with pytest.raises(RuntimeLimitError, match="exhausted"):
        pages.ensure(1, 4)
    pages.release(0)
    pages.ensure(1, 4)
    assert pages.tables == [[], [2, 0]]
    assert pages.tensor([1]).tolist() == [[2, 0]]


def test_a_corrupt_program_is_refused_before_it_is_loaded(tmp_path) -> None:
    import shutil

    from rbln_build.errors import IntegrityError

    cell = tmp_path / "cell"
    shutil.copytree(finalized("tiny_llama", 5), cell)
    (cell / "program.pt2").unlink()
    (cell / "program.pt2").write_bytes(b"not a zip")
    with pytest.raises(IntegrityError, match="does not match .* recorded in rbln-build.json"):
        load_artifact(cell)


def test_a_plan_cannot_be_run(tmp_path) -> None:
    (tmp_path / "rbln-build.json").write_text(
        json.dumps({"format": "rbln-build/cell/1", "artifact": "plan", "kvcache_num_blocks": 5, "programs": {}})
    )
    with pytest.raises(UserError, match="resolved plan, not a compiled program"):
        load_artifact(tmp_path)


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbln_build.run", *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )


@pytest.mark.integration
def test_cli_prints_the_tokens() -> None:
    cell = finalized("tiny_llama", 5)
    expected = load_artifact(cell).generate(PROMPTS, max_new_tokens=4)
    proc = _run_cli(
        str(cell), "--prompt-ids", "5,6,7,8,9", "--prompt-ids", ",".join(map(str, PROMPTS[1])), "--max-new-tokens", "4"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"prompt {i}: {','.join(map(str, t))}" for i, t in enumerate(expected)]


@pytest.mark.parametrize(
    "args, message",
    [
        pytest.param(
            ["{cell}", "--prompt-ids", ",".join(["1"] * 2100), "--prompt-ids", ",".join(["2"] * 2100)],
            "needs 6 KV-cache blocks",
            id="pool_exceeded",
        ),
        pytest.param(["/nonexistent/cell", "--prompt-ids", "1"], "not a directory", id="missing_artifact"),
    ],
)
@pytest.mark.integration
def test_cli_errors_are_one_line_exit_2(args: list[str], message: str) -> None:
    cell = str(finalized("tiny_llama", 5))
    proc = _run_cli(*[a.format(cell=cell) for a in args])
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.integration
def test_cli_help_and_usage_errors() -> None:
    proc = _run_cli("--help")
    assert proc.returncode == 0 and "--prompt-ids" in proc.stdout and "kvcache_num_blocks" in proc.stdout
    proc = _run_cli("somewhere", "--prompt-ids", "1,x")
    assert proc.returncode == 2 and "comma-separated integers" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny_llama", "tiny_qwen3"])
def test_every_pool_size_of_one_export_computes_the_same_tokens(name: str) -> None:
    reference = build_model(load_recipe(name))
    expected = [hf_greedy(reference, p, 24) for p in PROMPTS]
    att = compiled(name).spec.attention
    for n in range(att.num_min_blocks, att.num_full_blocks + 1):
        artifact = load_artifact(finalized(name, n))
        assert artifact.num_blocks == n
        assert artifact.generate(PROMPTS, max_new_tokens=24) == expected, n
    assert compiled(name).exports == 1
