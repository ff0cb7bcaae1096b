"""Composition of every option of every group; typed errors with the key's path; budget types kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException

from rbln_build.colocation import expand_all
from rbln_build.config._config import CONF_DIR, compose_settings, list_group_options, load_group_option
from rbln_build.errors import ConfigError

GROUPS = ("matrix", "model", "device")


def _all_options() -> list[object]:
    return [pytest.param(g, o, id=f"{g}={o}") for g in GROUPS for o in list_group_options(g)]


def test_every_group_has_options() -> None:
    for group in GROUPS:
        assert list_group_options(group), f"conf/{group}/ has no options"


@pytest.mark.parametrize(("group", "option"), _all_options())
def test_compose_every_option(group: str, option: str, tmp_path: Path) -> None:
    # glob(*)-style smoke test: every option composes against the schema and expands to cells.
    settings = compose_settings([f"{group}={option}", f"build_dir={tmp_path}"])
    _, cells = expand_all([settings])
    assert cells
    if group == "model":
        assert {c.model for c in cells} == {option}
    if group == "device":
        assert {c.device.name for c in cells} == {option}
    assert not tmp_path.joinpath("cache").exists()  # composing and expanding writes nothing


def _composition_error(overrides: list[str]) -> str:
    with pytest.raises((ConfigCompositionException, ConfigError)) as info:
        compose_settings(overrides)
    return f"{info.value} {info.value.__cause__}"


@pytest.mark.parametrize(
    ("override", "key_path"),
    [
        pytest.param("matrix.budgetz=[0.3]", "matrix.budgetz", id="misspelt-matrix-key"),
        pytest.param("build_dirr=x", "build_dirr", id="misspelt-root-key"),
        pytest.param("+build_dirr=x", "build_dirr", id="misspelt-root-key-appended"),
        pytest.param("+matrix.budgetz=[1]", "matrix.budgetz", id="misspelt-matrix-key-appended"),
        pytest.param("matrix.batch_sizes=[a]", "matrix.batch_sizes[0]", id="wrong-type-list-item"),
        pytest.param("matrix.backend=tensorflow", "matrix.backend", id="unknown-enum"),
        pytest.param("matrix.attn_impl=flash", "matrix.attn_impl", id="unknown-attn"),
        pytest.param("progress=maybe", "progress", id="wrong-type-bool"),
        pytest.param("matrix.include=[{budgts:[1]}]", "matrix.include[0].budgts", id="include-misspelt-key"),
        pytest.param(
            "matrix.include=[{},{batch_sizes:[a]}]",
            "matrix.include[1].batch_sizes[0]",
            id="include-wrong-type-list-item",
        ),
        pytest.param("matrix.include=[{attn_impl:flash}]", "matrix.include[0].attn_impl", id="include-unknown-attn"),
        pytest.param(
            "matrix.include=[{models:[tiny_llama,nope]}]", "matrix.include[0].models[1]", id="include-unknown-model"
        ),
        pytest.param("matrix.include=[{devices:[atom]}]", "matrix.include[0].devices[0]", id="include-unknown-device"),
        pytest.param("matrix.include=[{budgets:[]}]", "matrix.include[0].budgets", id="include-empty-axis"),
        pytest.param("matrix.include=[{models:null}]", "matrix.include[0].models", id="include-null-axis"),
        pytest.param("matrix.include=[{budgets:[[1]]}]", "matrix.include[0].budgets[0]", id="include-list-budget"),
        pytest.param(
            "matrix.include=[{kvcache_num_blocks:[-1]}]",
            "matrix.include[0].kvcache_num_blocks[0]",
            id="include-negative-blocks",
        ),
        pytest.param(
            "matrix.include=[{max_seq_lens:[0]}]", "matrix.include[0].max_seq_lens[0]", id="include-non-positive"
        ),
        pytest.param("matrix.include=[tiny_llama]", "matrix.include[0]", id="include-not-a-mapping"),
        pytest.param("matrix.include=null", "matrix.include", id="include-null"),
        # a malformed budget is a config error before anything compiles (over-DRAM stays a cell result)
        pytest.param("budget=abc", "budget: memory_budget 'abc' is not a valid byte size", id="budget-malformed"),
        pytest.param("budget=true", "budget: memory_budget must not be a boolean", id="budget-bool"),
        pytest.param(
            "matrix.budgets=[0.3,1.5]",
            "matrix.budgets[1]: memory_budget fraction must be in (0, 1]",
            id="budget-fraction-out-of-range",
        ),
        pytest.param("budget=[0.3,0]", "budget[1]: memory_budget byte count must be positive", id="budget-zero"),
        pytest.param(
            "matrix.include=[{budgets:['10 PB']}]",
            "matrix.include[0].budgets[0]: memory_budget",
            id="include-budget-malformed",
        ),
    ],
)
def test_bad_override_names_the_key(override: str, key_path: str) -> None:
    assert key_path in _composition_error([override])


def test_unknown_group_option_lists_the_known_ones() -> None:
    message = _composition_error(["device=atom"])
    assert "device/atom" in message


def test_misspelt_key_in_a_group_file(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "bad.yaml").write_text("recipe: tiny_llama\nbatch_sise: 2\n")
    with pytest.raises(ConfigError) as info:
        load_group_option("model", "bad", "matrix.models[0]", conf_dir=tmp_path)
    assert "bad.yaml" in str(info.value) and "batch_sise" in str(info.value)


def test_wrong_type_in_a_group_file(tmp_path: Path) -> None:
    (tmp_path / "device").mkdir()
    (tmp_path / "device" / "bad.yaml").write_text("npu: RBLN-CA25\nnum_devices: four\n")
    with pytest.raises(ConfigError) as info:
        load_group_option("device", "bad", "matrix.devices[0]", conf_dir=tmp_path)
    assert "num_devices" in str(info.value)


def test_unknown_model_in_the_matrix_names_the_index() -> None:
    with pytest.raises(ConfigError) as info:
        compose_settings(["matrix.models=[tiny_llama,nope]"])
    assert "matrix.models[1]" in str(info.value) and "tiny_llama" in str(info.value)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        pytest.param("budget=0.3", 0.3, id="fraction"),
        pytest.param("budget=1", 1, id="int-one-byte"),
        pytest.param("budget=1.0", 1.0, id="float-100pct"),
        pytest.param("budget=null", None, id="null"),
        pytest.param("budget=10GB", "10GB", id="byte-string"),
        pytest.param("budget=50%", "50%", id="percent"),
        pytest.param("budget=1073741824", 1073741824, id="int-bytes"),
    ],
)
def test_budget_type_is_kept(override: str, expected: object) -> None:
    (budget,) = compose_settings([override]).matrix.budgets
    assert budget == expected and type(budget) is type(expected)


def test_budget_list_types_are_kept() -> None:
    budgets = compose_settings(["matrix.budgets=[1,1.0,null,'10GB']"]).matrix.budgets
    assert [type(b) for b in budgets] == [int, float, type(None), str]


def test_narrowing_replaces_the_axis() -> None:
    s = compose_settings(["matrix=release", "device=atom_max_x4", "budget=0.3"])
    assert [d.name for d in s.matrix.devices] == ["atom_max_x4"]
    assert s.matrix.devices[0].num_devices == 4
    assert s.matrix.budgets == (0.3,)
    assert len(s.matrix.models) > 1


def test_paths_come_from_one_root(tmp_path: Path) -> None:
    s = compose_settings([], cwd=tmp_path)
    assert s.build_dir == tmp_path / "build"
    assert s.recipes_dir == CONF_DIR.parent / "recipes"


def test_misspelt_key_in_an_include_entry_of_a_matrix_file(tmp_path: Path) -> None:
    # OmegaConf alone would report only "budgts" for a key inside a list; the entry's index is named.
    (tmp_path / "matrix").mkdir()
    (tmp_path / "matrix" / "mine.yaml").write_text(
        "models: [tiny_llama]\ndevices: [atom_max]\nbudgets: [0.3]\n"
        "include:\n  - models: [tiny_qwen3]\n  - models: [tiny_qwen3]\n    budgts: ['130MB']\n"
    )
    message = _composition_error([f"hydra.searchpath=[file://{tmp_path}]", "matrix=mine"])
    assert "matrix.include[1].budgts: unknown key" in message


def test_include_entries_keep_budget_types_and_inherit_omitted_keys() -> None:
    s = compose_settings(
        [
            "matrix=plans",
            "matrix.batch_sizes=[2]",
            "matrix.attn_impl=eager",
            "matrix.include=[{budgets:[1,1.0,null,'10GB']},{batch_sizes:null,attn_impl:null}]",
        ]
    )
    first, second = s.matrix.include
    assert [type(b) for b in first.budgets] == [int, float, type(None), str]
    assert (first.batch_sizes, first.attn_impl, first.where) == ((2,), "eager", "matrix.include[0]")
    assert [m.name for m in first.models] == [m.name for m in s.matrix.models]
    assert (second.batch_sizes, second.attn_impl) == (None, None)  # an explicit null: each model's default
    assert second.budgets == s.matrix.budgets


@pytest.mark.parametrize("group", ["model", "device", "matrix"])
def test_a_list_for_a_config_group_is_refused_with_what_to_write_instead(group: str, tmp_path: Path) -> None:
    """`model=[a,b]` makes Hydra merge the two options into one config with no name: it built a
    model named None from the last option's recipe. Refused, naming the ways to build several."""
    options = {"model": "[tiny_llama,qwen3_8b]", "device": "[rebel100,atom_max]", "matrix": "[plans,default]"}
    with pytest.raises(ConfigError) as info:
        compose_settings([f"{group}={options[group]}"])
    message = str(info.value)
    assert message.startswith(f"{group}: selects several {group} configs") and f"-m {group}=a,b" in message
    assert (f"matrix.{group}s=[a,b]" in message) == (group != "matrix")
    if group == "model":  # what the message offers builds both, each under its own name
        _, cells = expand_all([compose_settings(["matrix.models=[tiny_llama,qwen3_8b]", f"build_dir={tmp_path}"])])
        assert {"tiny_llama", "qwen3_8b"} <= {c.model for c in cells} and None not in {c.model for c in cells}
