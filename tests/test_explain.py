"""``rbln-build explain``: the table, --json, --help and clear errors with exit status 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from memory_helpers import _CACHE, inventory

from rbln_build.inspection._explain import main as explain_main


@pytest.fixture(autouse=True)
def warm_cache(tmp_path, monkeypatch):
    """Point the default inventory cache at a copy of the test cache, so nothing is rebuilt."""
    inventory("qwen3_8b")
    inventory("tiny_qwen3")
    target = tmp_path / "inventory"
    shutil.copytree(_CACHE, target)
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path))
    return tmp_path


def run(capsys, *argv):
    code = explain_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_table_for_qwen3_8b_on_rebel100(capsys):
    code, out, err = run(capsys, "model=qwen3_8b", "device=rebel100")
    assert code == 0 and err == ""
    assert "not a compiler report" in out
    assert "weights                              3,384 MiB     3,384 MiB     3,384 MiB     4,574 MiB" in out
    assert "KV per block (2 MiB-aligned)           288 MiB       288 MiB       288 MiB       288 MiB" in out
    assert "full pool (40 blocks)" in out and "floor (9 blocks)" in out
    assert "           0.3      45,097,156,608  21\n" in out
    assert "           0.2      30,064,771,072  error: below the floor (8 blocks fit, 9 needed)\n" in out


def test_json_for_atom_max_x4_is_deterministic(capsys):
    argv = ("model=qwen3_8b", "device=atom_max_x4", "budgets=0.5,1.0", "--json")
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert run(capsys, *argv)[1] == out
    data = json.loads(out)
    facts = (data["num_devices"], data["npu"], data["num_full_blocks"], data["num_min_blocks"])
    assert facts == (4, "RBLN-CA25", 40, 9)
    assert [(r["budget"], r["kvcache_num_blocks"]) for r in data["budgets"]] == [(0.5, 14), (1.0, 40)]
    assert len(data["per_chiplet"]) == 4 and data["per_chiplet"][0][0]["kv_per_block"] == 288 * 2**20
    assert data["budget_for_floor"]["blocks"] == 9 and data["budget_for_floor"]["bytes"] > 0


def test_options_override_the_recipe_defaults(capsys):
    code, out, _ = run(capsys, "model=qwen3_8b", "device=rebel100", "batch_size=1", "budgets=30%,40GB", "--json")
    data = json.loads(out)
    assert code == 0 and (data["num_full_blocks"], data["num_min_blocks"]) == (5, 5)
    assert [r["kvcache_num_blocks"] for r in data["budgets"]] == [5, 5]


def test_help(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "model=" in out and "qwen3_8b" in out and "rebel100" in out and "--json" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        pytest.param(
            ["model=nope", "device=rebel100"], "explain model=: unknown model 'nope'; known: gemma3_1b", id="model"
        ),
        pytest.param(["model=qwen3_8b", "device=nope"], "known: atom_max, atom_max_x4, rebel100", id="device"),
        pytest.param(["device=rebel100"], "missing model=", id="missing"),
        pytest.param(["model=qwen3_8b", "device=rebel100", "colour=red"], "unknown option 'colour'", id="key"),
        pytest.param(["model=qwen3_8b", "device=rebel100", "batch_size=two"], "is not an integer", id="int"),
        pytest.param(["model=qwen3_8b", "device=rebel100", "max_seq_len=40000"], "must be a multiple", id="attn"),
    ],
)
def test_errors_exit_2_without_traceback(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and message in err and "Traceback" not in err


def test_a_model_configs_build_options_apply_as_in_a_build(capsys, tmp_path, monkeypatch):
    # model= names a conf/model file (here a project's), whose build options apply before explain's own
    (tmp_path / "rbln-build.yaml").write_text("{}\n")
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "qwen3_8b_bs1.yaml").write_text("recipe: qwen3_8b\nbatch_size: 1\n")
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "model=qwen3_8b_bs1", "device=rebel100", "--json")
    data = json.loads(out)
    assert code == 0 and data["attention"]["batch_size"] == 1 and data["num_full_blocks"] == 5
    code, out, _ = run(capsys, "model=qwen3_8b_bs1", "device=rebel100", "batch_size=2", "--json")
    assert code == 0 and json.loads(out)["attention"]["batch_size"] == 2  # the command line wins


@pytest.mark.integration
def test_module_entry_point_subprocess(warm_cache):
    env = {**os.environ, "RBLN_BUILD_CACHE": str(warm_cache), "HF_HUB_OFFLINE": "1"}
    ok = subprocess.run(
        [sys.executable, "-m", "rbln_build.explain", "model=tiny_qwen3", "device=atom_max", "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["model"] == "tiny_qwen3"
    bad = subprocess.run(
        [sys.executable, "-m", "rbln_build.explain", "model=x", "device=rebel100"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "unknown model" in bad.stderr


@pytest.mark.integration
def test_explain_on_a_cache_hit_imports_no_torch(warm_cache):
    env = {**os.environ, "RBLN_BUILD_CACHE": str(warm_cache), "HF_HUB_OFFLINE": "1"}
    code = (
        "import sys, io, contextlib; from rbln_build.memory.explain import main\n"
        "with contextlib.redirect_stdout(io.StringIO()): rc = main(['model=qwen3_8b', 'device=rebel100'])\n"
        "assert rc == 0 and 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)[:5]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.parametrize("device", ["rebel100", "atom_max_x4"])
def test_docs_show_the_current_output(capsys, device):
    """docs/memory-model.md quotes explain's real output; regenerate it when the model changes."""
    import difflib
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "memory-model.md").read_text()
    command = f"$ rbln-build explain model=qwen3_8b device={device}\n"
    assert command in doc
    quoted = doc.split(command, 1)[1].split("\n```", 1)[0] + "\n"
    code, out, _ = run(capsys, "model=qwen3_8b", f"device={device}")
    assert code == 0
    diff = "".join(difflib.unified_diff(quoted.splitlines(True), out.splitlines(True), "docs", "explain"))
    assert not diff, (
        f"docs/memory-model.md is stale; paste the output of `python -m rbln_build.explain model=qwen3_8b "
        f"device={device}` into it:\n{diff}"
    )


def test_attn_impl_eager_is_honoured_or_refused_with_the_reason(capsys):
    # the recipe's partition length (a flash-attention setting) no longer switches eager back to flash_attn
    code, out, err = run(capsys, "model=qwen3_8b", "device=rebel100", "attn_impl=eager", "max_seq_len=8192", "--json")
    data = json.loads(out)
    assert code == 0 and data["attention"]["attn_impl"] == "eager" and data["attention"]["kvcache_block_size"] == 8192
    assert data["warnings"][0].startswith("attn_impl=eager: the default kvcache_partition_len=8192")
    code, out, err = run(capsys, "model=qwen3_8b", "device=rebel100", "attn_impl=eager")  # 40960 tokens: too long
    assert code == 2 and out == "" and "cannot use these attention options (attn_impl=eager)" in err
    assert "exceeds the REBEL limit of 16384 for 'eager' attention" in err
    # a partition length given with eager is the user's own: the estimator's switch is said, not dropped
    argv = ("model=qwen3_8b", "device=rebel100", "attn_impl=eager", "kvcache_partition_len=4096", "max_seq_len=8192")
    code, out, err = run(capsys, *argv)
    assert code == 0 and "attention   flash_attn" in out
    assert "warning: `kvcache_partition_len` is set, and KV-cache partitioning needs flash attention" in out
