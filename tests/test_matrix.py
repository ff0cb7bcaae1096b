"""Matrix expansion: order, readable stable ids, narrowing, per-cell setup errors."""

from __future__ import annotations

import pytest

from rbln_build.colocation import expand_all
from rbln_build.config._config import compose_settings
from rbln_build.config._matrix import expand, format_budget
from rbln_build.errors import ConfigError

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
    got = ids(
        [
            "matrix=plans",
            "model=qwen3_8b",
            "device=rebel100",
            "budget=null",
            "matrix.batch_sizes=[1]",
            "matrix.kvcache_num_blocks=[0,5]",
        ]
    )
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
    jobs = [
        compose_settings(["matrix=plans", f"budget={b}", f"device={d}"])
        for b in (0.3, 0.5)
        for d in ("atom_max_x4", "rebel100")
    ]
    _, union = expand_all(jobs)
    _, whole = expand_all([compose_settings(["matrix=plans"])])
    assert sorted((c.id, c.cell_key) for c in union) == sorted((c.id, c.cell_key) for c in whole)


def test_a_sweep_shares_one_build_dir() -> None:
    with pytest.raises(ConfigError, match="share one build directory"):
        expand_all([compose_settings(["build_dir=a"]), compose_settings(["build_dir=b"])])


# ------------------------------------------------------------------------------- matrix.include

DEFAULT_MAIN = [
    f"{m}.{d}.b{b}"
    for m in ("tiny_llama", "tiny_qwen3", "llama3_2_1b", "qwen3_8b")
    for d in ("atom_max_x4", "rebel100")
    for b in ("0.3", "0.5")
]
DEFAULT_INCLUDE = ["tiny_llama.rebel100.b208MB", "tiny_qwen3.rebel100.b216MB"]


def test_include_cells_follow_the_main_product_in_order() -> None:
    # The main product keeps exactly the ids and order it had before include existed.
    assert ids([]) == DEFAULT_MAIN + DEFAULT_INCLUDE


def test_include_entries_expand_in_order_and_inherit_omitted_keys() -> None:
    got = ids(
        [
            "matrix=plans",
            "matrix.include=[{models:[qwen3_8b],budgets:['40GB']},"
            "{models:[llama3_2_1b],devices:[rebel100],budgets:['10GB',null],batch_sizes:[1]}]",
        ]
    )
    assert got == ids(["matrix=plans"]) + [
        "qwen3_8b.atom_max_x4.b40GB",  # devices: the main matrix's
        "qwen3_8b.rebel100.b40GB",
        "llama3_2_1b.rebel100.bs1.b10GB",  # a build-option axis the entry sets appears in its ids
        "llama3_2_1b.rebel100.bs1.bnone",
    ]


def test_include_cells_equal_the_same_cells_of_a_plain_matrix() -> None:
    # An include cell is the cell a matrix listing it directly would give: same id, same keys.
    settings = compose_settings(["matrix=plans", "matrix.include=[{models:[qwen3_8b],budgets:['40GB']}]"])
    included = expand(settings, TOOLCHAIN)[-2:]
    plain = expand(compose_settings(["matrix=plans", "model=qwen3_8b", "budget=40GB"]), TOOLCHAIN)
    assert [(c.id, c.cell_key, c.compile_key) for c in included] == [(c.id, c.cell_key, c.compile_key) for c in plain]


def test_include_entry_options_do_not_leak_into_the_main_product() -> None:
    cells = expand(
        compose_settings(
            [
                "matrix=plans",
                "model=qwen3_8b",
                "device=rebel100",
                "budget=0.3",
                "matrix.include=[{max_seq_lens:[8192],attn_impl:eager}]",
            ]
        ),
        TOOLCHAIN,
    )
    assert [c.id for c in cells] == ["qwen3_8b.rebel100.b0.3", "qwen3_8b.rebel100.s8192.eager.b0.3"]
    assert (cells[0].option("max_seq_len"), cells[0].option("attn_impl")) == (40960, "flash_attn")
    assert (cells[1].option("max_seq_len"), cells[1].option("attn_impl")) == (8192, "eager")


def test_a_cell_repeated_by_an_include_entry_is_kept_once_where_it_first_appears() -> None:
    got = ids(["matrix=plans", "matrix.include=[{models:[qwen3_8b],budgets:[0.5,0.7]},{budgets:[0.7]}]"])
    assert got == ids(["matrix=plans"]) + [
        "qwen3_8b.atom_max_x4.b0.7",
        "qwen3_8b.rebel100.b0.7",
        "llama3_2_1b.atom_max_x4.b0.7",
        "llama3_2_1b.rebel100.b0.7",
    ]


def test_one_id_with_different_inputs_names_both_places() -> None:
    # The int 1073741824 and the string "1073741824" print as one id but are different typed budgets.
    with pytest.raises(ConfigError) as info:
        ids(["matrix=plans", "matrix.budgets=[1073741824]", "matrix.include=[{},{budgets:['1073741824']}]"])
    message = str(info.value)
    assert "matrix.include[1]" in message and "defined by matrix " in message and "b1073741824" in message


def test_a_value_listed_twice_in_one_include_entry_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"matrix\.include\[0\]: two cells have the id"):
        ids(["matrix=plans", "matrix.include=[{budgets:[0.7,0.7]}]"])


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param(
            ["model=qwen3_8b"], [i for i in DEFAULT_MAIN if i.startswith("qwen3_8b.")], id="model-not-in-include"
        ),
        pytest.param(
            ["model=tiny_llama"],
            [i for i in DEFAULT_MAIN if i.startswith("tiny_llama.")] + DEFAULT_INCLUDE[:1],
            id="model-in-one-entry",
        ),
        pytest.param(
            ["device=atom_max_x4"], [i for i in DEFAULT_MAIN if ".atom_max_x4." in i], id="device-not-in-include"
        ),
        pytest.param(
            ["device=atom_max"],
            [i.replace(".atom_max_x4.", ".atom_max.") for i in DEFAULT_MAIN if ".atom_max_x4." in i],
            id="device-in-no-entry",
        ),
        pytest.param(
            ["device=rebel100"],
            [i for i in DEFAULT_MAIN if ".rebel100." in i] + DEFAULT_INCLUDE,
            id="device-in-every-entry",
        ),
        pytest.param(["budget=0.3"], [i for i in DEFAULT_MAIN if i.endswith(".b0.3")], id="budget-not-in-include"),
        pytest.param(
            ["budget=216MB", "device=rebel100"],
            [f"{m}.rebel100.b216MB" for m in ("tiny_llama", "tiny_qwen3", "llama3_2_1b", "qwen3_8b")],
            id="budget-in-an-entry-deduplicated",
        ),
        pytest.param(
            ["model=tiny_qwen3", "device=rebel100", "budget=216MB"],
            ["tiny_qwen3.rebel100.b216MB"],
            id="all-three-to-one-include-cell",
        ),
    ],
)
def test_narrowing_applies_to_include_entries(overrides: list[str], expected: list[str]) -> None:
    assert ids(overrides) == expected


def test_narrowing_an_include_entry_keeps_budget_types() -> None:
    # budget=1 is one byte, not 1.0 (100%): it does not select the entry's 1.0.
    assert ids(["matrix=plans", "budget=1", "matrix.include=[{budgets:[1.0]}]"]) == ids(["matrix=plans", "budget=1"])
    # budget=1.0 selects it (the entry's cells then repeat the narrowed main product's: kept once).
    assert ids(["matrix=plans", "budget=1.0", "matrix.include=[{budgets:[1.0]}]"]) == ids(
        ["matrix=plans", "budget=1.0"]
    )


def test_narrowed_model_options_apply_to_include_cells() -> None:
    cells = expand(compose_settings(["model=tiny_llama", "model.batch_size=1", "device=rebel100"]), TOOLCHAIN)
    assert [c.id for c in cells] == [
        "tiny_llama.rebel100.b0.3",
        "tiny_llama.rebel100.b0.5",
        "tiny_llama.rebel100.b208MB",
    ]
    assert {c.option("batch_size") for c in cells} == {1}


def test_expected_failures_apply_to_include_cells() -> None:
    cells = expand(
        compose_settings(
            [
                "matrix=plans",
                "matrix.include=[{models:[qwen3_8b],devices:[rebel100],budgets:['20GB']}]",  # below the floor
                "matrix.expect_failure=[{cell:qwen3_8b.rebel100.b20GB,kind:insufficient_memory}]",
            ]
        ),
        TOOLCHAIN,
    )
    assert [c.id for c in cells if c.expected is not None] == ["qwen3_8b.rebel100.b20GB"]


def test_a_sweep_of_the_default_matrix_unions_to_it() -> None:
    jobs = [compose_settings([f"device={d}"]) for d in ("atom_max_x4", "rebel100")]
    _, union = expand_all(jobs)
    _, whole = expand_all([compose_settings([])])
    assert sorted((c.id, c.cell_key) for c in union) == sorted((c.id, c.cell_key) for c in whole)
