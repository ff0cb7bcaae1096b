"""The hostile-input probe's remaining failures (issue 36, item 7): each is now a one-line error with
exit 2, naming the file or key, instead of a traceback or a wrong answer."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from test_checkpoint import checkpoint
from test_cli import PLANS, check_ok, rbln
from test_input_boundary import one_line_error, run_cli


def _recipe_add(tmp_path: Path, source: Path) -> str:
    code, _, err = run_cli(["recipe", "add", "mine", "--from", str(source), "--to", "recipes"], tmp_path)
    line = one_line_error(code, err, "rbln-build recipe: ")
    assert not (tmp_path / "recipes").exists()
    return line


def test_recipe_add_of_a_safetensors_header_nested_200k_deep(tmp_path: Path) -> None:
    source = checkpoint(tmp_path / "ck")
    header = b"[" * 200_000 + b"]" * 200_000
    (source / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    assert "nested too deeply" in _recipe_add(tmp_path, source)


def test_recipe_add_of_an_index_whose_weight_map_value_is_an_int(tmp_path: Path) -> None:
    source = checkpoint(tmp_path / "ck")
    (source / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"lm_head.weight": 1}}))
    assert "not a valid safetensors index" in _recipe_add(tmp_path, source)


@pytest.mark.parametrize("value", ["abc", 0, True, 1.5])
def test_recipe_add_refuses_a_max_position_embeddings_that_is_not_a_count(tmp_path: Path, value: object) -> None:
    source = checkpoint(tmp_path / "ck")
    config = json.loads((source / "config.json").read_text())
    config["max_position_embeddings"] = value
    (source / "config.json").write_text(json.dumps(config))
    assert "max_position_embeddings is" in _recipe_add(tmp_path, source)


@pytest.mark.parametrize("shard", ["1/" + "9" * 12, "1/" + "9" * 5000, "1/10001"])
def test_a_huge_shard_count_is_a_usage_error(tmp_path: Path, shard: str) -> None:
    code, _, err = run_cli(
        [*PLANS, f"shard={shard}", "cache.remote=file:///nowhere", f"build_dir={tmp_path / 'b'}"], tmp_path
    )
    assert "shard: expected I/N with 1 <= I <= N <= 10,000" in one_line_error(code, err, "rbln-build: ")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("plans")
    check_ok(rbln([*PLANS, f"build_dir={work / 'build'}"], cwd=work))
    return work / "build"


@pytest.mark.parametrize("blocks", ["NaN", str(10**18), "-1", '"8"'])
def test_report_on_a_manifest_with_a_count_no_build_writes(built: Path, tmp_path: Path, blocks: str) -> None:
    build = tmp_path / "build"
    shutil.copytree(built, build, symlinks=True)
    path = build / "manifest.json"
    manifest = json.loads(path.read_text())
    cid = next(c for c, e in manifest["cells"].items() if e["kvcache_num_blocks"] is not None)
    manifest["cells"][cid]["kvcache_num_blocks"] = "@@"
    path.write_text(json.dumps(manifest).replace('"@@"', blocks))
    code, _, err = run_cli(["report", f"build_dir={build}"], tmp_path)
    line = one_line_error(code, err, "rbln-build report: ")
    assert f"cell {cid!r} has kvcache_num_blocks" in line


@pytest.mark.parametrize(
    ("override", "says"),
    [
        pytest.param("budgt=0.3", "budgt: no such key; did you mean budget?", id="root-key"),
        pytest.param(
            "matrix.budgts=[0.3]", "matrix.budgts: no such key; did you mean matrix.budgets?", id="matrix-key"
        ),
        pytest.param(
            "device=rebel10",
            "device=rebel10: no such option; did you mean device=rebel100? (the options: atom_max, atom_max_x4, rebel100)",
            id="group-option",
        ),
        pytest.param("matrix=plan", "matrix=plan: no such option; did you mean matrix=plans?", id="matrix-option"),
    ],
)
def test_a_misspelt_override_names_the_closest(tmp_path: Path, override: str, says: str) -> None:
    """A new user's typo (issue 36): one line with the closest names, not Hydra's text (the config
    search path, '+key=' advice)."""
    code, _, err = run_cli([*PLANS, override, f"build_dir={tmp_path / 'b'}"], tmp_path)
    line = one_line_error(code, err, "rbln-build: ")
    assert says in line and "search path" not in line and "To append" not in line, line
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(
            ["plan", "deployment=tiny_pai"],
            "deployment=tiny_pai: no such option; did you mean deployment=tiny_pair?",
            id="plan-option",
        ),
        pytest.param(
            ["plan", "deployment=tiny_pair", "budgt=3"], "budgt: no such key; did you mean budget?", id="plan-key"
        ),
        pytest.param(["serve-command", "deployment=tiny_pai"], "did you mean deployment=tiny_pair?", id="serve-option"),
    ],
)
def test_a_misspelt_override_of_plan_and_serve_command_names_the_closest(
    tmp_path: Path, args: list[str], says: str
) -> None:
    """plan and serve-command compose the same config: the same one line, not Hydra's search path."""
    code, _, err = run_cli([*args, f"build_dir={tmp_path / 'b'}"], tmp_path)
    line = one_line_error(code, err, f"rbln-build {args[0]}: ")
    assert says in line and "search path" not in line and "To append" not in line, line


@pytest.mark.parametrize(
    ("args", "prefix", "says"),
    [
        pytest.param(
            ["matrix.models=[tiny_lama]"],
            "rbln-build: ",
            "unknown model 'tiny_lama'; did you mean tiny_llama?",
            id="matrix-models",
        ),
        pytest.param(
            ["explain", "model=qwen3_8", "device=rebel100"],
            "explain model=: ",
            "did you mean qwen3_8b",
            id="explain-model",
        ),
        pytest.param(
            ["explain", "model=qwen3_8b", "device=rebel10"],
            "explain device=: ",
            "did you mean rebel100?",
            id="explain-device",
        ),
    ],
)
def test_a_misspelt_model_or_device_in_a_list_names_the_closest(
    tmp_path: Path, args: list[str], prefix: str, says: str
) -> None:
    code, _, err = run_cli([*args, f"build_dir={tmp_path / 'b'}"] if args[0] != "explain" else args, tmp_path)
    line = one_line_error(code, err, prefix)
    assert says in line and "known: " in line, line
