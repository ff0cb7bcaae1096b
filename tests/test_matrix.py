"""Matrix expansion: order, readable stable ids, narrowing, per-cell setup errors."""

from __future__ import annotations

import pytest

from rbln_build.config import compose_settings
from rbln_build.errors import ConfigError
from rbln_build.matrix import expand, expand_all, format_budget

TOOLCHAIN = {"torch": "t", "transformers": "t", "format": "1"}


def ids(overrides: list[str]) -> list[str]:
    return [c.id for c in expand(compose_settings(overrides), TOOLCHAIN)]


def test_order_and_ids_of_the_plans_matrix() -> None:
    assert ids(["matrix=plans"]) == [
        "llama3_2_1b.atom_max_x4.b0.3",
        "llama3_2_1b.atom_max_x4.b0.5",
        "llama3_2_1b.rebel100.b0.3",
        "llama3_2_1b.rebel100.b0.5",
        "qwen3_8b.atom_max_x4.b0.3",
        "qwen3_8b.atom_max_x4.b0.5",
        "qwen3_8b.rebel100.b0.3",
        "qwen3_8b.rebel100.b0.5",
    ]


@pytest.mark.parametrize(
    ("budget", "text"),
    [
        pytest.param(None, "none", id="null"),
        pytest.param(0.3, "0.3", id="fraction"),
        pytest.param(1, "1", id="int"),
        pytest.param(1.0, "1.0", id="float"),
        pytest.param("10GB", "10GB", id="bytes-string"),
        pytest.param("50%", "50pct", id="percent"),
        pytest.param("a b/c", "a_b_c", id="unsafe-chars"),
    ],
)
def test_budget_in_ids(budget: object, text: str) -> None:
    assert format_budget(budget) == text


def test_narrowed_ids_are_a_subset_in_the_same_order() -> None:
    full = ids(["matrix=plans"])
    narrow = ids(["matrix=plans", "device=rebel100", "budget=0.5"])
    assert narrow == [i for i in full if ".rebel100." in i and i.endswith(".b0.5")]


def test_expansion_is_stable() -> None:
    a = expand(compose_settings(["matrix=release"]), TOOLCHAIN)
    b = expand(compose_settings(["matrix=release"]), TOOLCHAIN)
    assert [(c.id, c.cell_key, c.compile_key) for c in a] == [(c.id, c.cell_key, c.compile_key) for c in b]


def test_explicit_matrix_options_appear_in_ids() -> None:
    got = ids(["matrix=plans", "model=qwen3_8b", "device=rebel100", "budget=null",
               "matrix.batch_sizes=[1]", "matrix.kvcache_num_blocks=[0,5]"])
    assert got == ["qwen3_8b.rebel100.bs1.bnone", "qwen3_8b.rebel100.bs1.bnone.n5"]


def test_duplicate_cell_ids_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match="two cells have the id"):
        ids(["matrix=plans", "matrix.budgets=[0.3,0.3]"])


def test_invalid_attention_fails_only_that_cell() -> None:
    cells = expand(compose_settings(["matrix=plans", "matrix.max_seq_lens=[40000]"]), TOOLCHAIN)
    assert all(c.setup_error is not None and c.setup_error[1] == "invalid_attention" for c in cells)
    assert all(c.compile_key is None for c in cells)
    assert "must be a multiple of `kvcache_partition_len`" in cells[0].setup_error[0]  # type: ignore[index]


def test_expected_failures_attach_to_their_cell() -> None:
    cells = expand(compose_settings(["matrix=plans"]), TOOLCHAIN)
    marked = [c.id for c in cells if c.expected is not None]
    assert marked == ["qwen3_8b.atom_max_x4.b0.3"]


def test_jobs_of_a_sweep_union_to_the_matrix() -> None:
    jobs = [compose_settings(["matrix=plans", f"budget={b}", f"device={d}"])
            for b in (0.3, 0.5) for d in ("atom_max_x4", "rebel100")]
    _, union = expand_all(jobs)
    _, whole = expand_all([compose_settings(["matrix=plans"])])
    assert sorted((c.id, c.cell_key) for c in union) == sorted((c.id, c.cell_key) for c in whole)


def test_a_sweep_shares_one_build_dir() -> None:
    with pytest.raises(ConfigError, match="share one build directory"):
        expand_all([compose_settings(["build_dir=a"]), compose_settings(["build_dir=b"])])
