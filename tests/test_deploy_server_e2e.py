"""A server deployment of the tiny pair end to end, through the real CLI (slow): one card's cell fails and
the other card's results are kept; with the rbln backend (real optimum-rbln 0.12.0, only ``rebel`` stood
in) and a real tokenizer trained offline, every model is served on its planned card.

The tiny recipes are copied into a test-local ``recipes_dir``: for the failure, tiny_qwen3's weights are a
local checkpoint (its own seeded weights, saved) with one tensor left out, which loads as a recipe (its
embedding and layer count match config.json) and fails when the torch backend builds it (``checkpoint does
not match the config``), as an incomplete download would; for serving, each recipe carries a byte-level
BPE tokenizer (``tests/_checkpoints.py``), so its compiled cell is served with ``--tokenizer`` the cell."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest
from _checkpoints import TOKENIZER_FILES, make_tokenizer
from _rbln_sdk import needs_optimum_rbln, sdk_on_path
from test_cli import check_ok, manifest, rbln, summary
from test_deploy_cli import FAKES, check_flags, record_of
from test_deploy_cli import env as env  # noqa: PLC0414  (the fixture: the models' inventories, copied once)
from test_deploy_server_cli import LEAVE_150, SERVER

from rbln_build.memory import DEFAULT_RECIPES_DIR

pytestmark = pytest.mark.slow

LLAMA, QWEN = "tiny_llama.atom_max.b94MB", "tiny_qwen3.atom_max.b140MB"  # card 0 and card 1 of the plan
PLACEMENT = {"tiny_llama": 0, "tiny_qwen3": 1}
LEAVE_40 = f"deployment.reservations.0.bytes={16_877_879_296 - 40 * 2**20}"


def tiny_recipes(root: Path) -> Path:
    for name in ("tiny_llama", "tiny_qwen3"):
        shutil.copytree(DEFAULT_RECIPES_DIR / name, root / name)
    return root


def save_qwen3_weights(recipes: Path, drop: str | None) -> None:
    """tiny_qwen3's own seeded weights as a local checkpoint (``weights: {path: ckpt}``), without ``drop``."""
    import torch
    from safetensors.torch import save_file

    from rbln_build.backends.torch._weights import build_model
    from rbln_build.memory import load_recipe

    model = build_model(load_recipe("tiny_qwen3", DEFAULT_RECIPES_DIR))
    state = {n: p.detach().to(torch.float32).contiguous() for n, p in model.named_parameters() if n != drop}
    assert drop is None or len(state) == len(dict(model.named_parameters())) - 1
    ckpt = recipes / "tiny_qwen3" / "ckpt"
    ckpt.mkdir(exist_ok=True)
    save_file(state, str(ckpt / "model.safetensors"))
    recipe = recipes / "tiny_qwen3" / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace("weights:\n  seed: 4321\n", "weights:\n  path: ckpt\n"))


def test_a_card_whose_cell_fails_keeps_the_other_cards_results_and_a_rerun_builds_only_it(
    tmp_path: Path,
    env: dict[str, str],  # noqa: F811
) -> None:
    recipes = tiny_recipes(tmp_path / "recipes")
    save_qwen3_weights(recipes, drop="model.layers.1.mlp.down_proj.weight")
    build = tmp_path / "build"
    args = ["deployment=tiny_pair", LEAVE_150, SERVER, f"recipes_dir={recipes}", f"build_dir={build}"]
    first = rbln(args, cwd=tmp_path, env=env)
    check_ok(first, 1)
    m = manifest(build)
    record = m["deployments"]["tiny_pair"]
    assert record["server"]["placement"] == PLACEMENT and record["status"] == "failed"
    # the failure is named as its card's, with the backend's reason
    assert len(record["problems"]) == 1, record["problems"]
    assert record["problems"][0].startswith(f"card 1: cell {QWEN} did not build: ")
    assert "checkpoint does not match the config" in record["problems"][0]
    assert f"tiny_pair: card 1: cell {QWEN} did not build" in first.stdout + first.stderr
    bad = m["cells"][QWEN]
    assert bad["status"] == "failed" and bad["artifact"] is None and bad["serving"] is None
    assert "model.layers.1.mlp.down_proj.weight" in bad["error"]
    assert not (build / "artifacts" / QWEN).exists()
    # card 0 is kept whole: its cell, its artifact (a real CPU program at the planned count) and its record
    ok = m["cells"][LLAMA]
    assert ok["status"] == "ok" and ok["kvcache_num_blocks"] == 8
    assert (build / "artifacts" / LLAMA).resolve() == (build / ok["artifact"]["path"]).resolve()
    assert record_of(build / "artifacts" / LLAMA)["kvcache_num_blocks"] == 8
    card0, card1 = record["cards"]
    assert (card0["card"], card0["status"], card0["problems"], card0["fits"]) == (0, "ok", [], True)
    assert card0["models"]["tiny_llama"]["kvcache_num_blocks"] == 8 and card0["serve"]["device_ids"] == [0]
    assert card1["status"] == "failed" and card1["models"]["tiny_qwen3"]["kvcache_num_blocks"] is None
    assert record["models"]["tiny_llama"]["card"] == 0 and record["models"]["tiny_qwen3"]["card"] == 1
    assert summary(build)["failed_cells"] == [QWEN]
    # not fixed: a recipe's error is retried (describe: only estimator and input failures are final), and
    # only the failed cell is; card 0's is reused as it was
    again = rbln([*args, "progress=false"], cwd=tmp_path, env=env)
    check_ok(again, 1)
    assert summary(build)["redone_cells"] == [QWEN] and manifest(build)["cells"][LLAMA] == ok
    # fixed (the complete checkpoint): only the failed cell is built; card 0's is reused as it was
    save_qwen3_weights(recipes, drop=None)
    fixed = rbln([*args, "progress=false"], cwd=tmp_path, env=env)
    check_ok(fixed)
    assert "1 compiled, 1 finalized, 1 skipped, 0 failed" in fixed.stdout
    assert summary(build)["redone_cells"] == [QWEN]
    m = manifest(build)
    record = m["deployments"]["tiny_pair"]
    assert record["status"] == "ok" and record["fits"] and m["cells"][LLAMA] == ok
    assert {n: v["kvcache_num_blocks"] for n, v in record["models"].items()} == {"tiny_llama": 8, "tiny_qwen3": 16}


def add_tokenizers(recipes: Path) -> None:
    """A byte-level BPE trained offline (``make_tokenizer``) beside each tiny recipe, named by it."""
    tokenizer = make_tokenizer()
    files = ", ".join(TOKENIZER_FILES)
    for name in ("tiny_llama", "tiny_qwen3"):
        tokenizer.save_pretrained(str(recipes / name))
        assert all((recipes / name / f).is_file() for f in TOKENIZER_FILES)
        with open(recipes / name / "recipe.yaml", "a") as f:
            f.write(f"tokenizer: {{files: [{files}]}}\n")


@needs_optimum_rbln
def test_an_rbln_server_is_planned_from_its_compiled_reports_and_serves_each_model_on_its_card(
    tmp_path: Path,
    env: dict[str, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # as on one card (tests/test_deploy_cli.py): the models are compiled first, the server is planned from
    # their compiled reports, then each card's cells are finalized from those compiles, in one run
    from _vllm_rbln import resolve_num_devices

    recipes = tiny_recipes(tmp_path / "recipes")
    add_tokenizers(recipes)
    rbln_env = dict(env, PYTHONPATH=f"{FAKES}:{os.environ.get('PYTHONPATH', '')}")
    build = tmp_path / "build"
    # the stand-in's reports: tiny_llama takes 22.75 MiB at its full 8 blocks, tiny_qwen3 31.20 MiB at its
    # floor and at its full 16; with 40 MiB left on each card, each fits a card alone but not both one card
    args = ["deployment=tiny_pair", LEAVE_40, SERVER, "matrix.backend=rbln", f"recipes_dir={recipes}"]
    args.append(f"build_dir={build}")
    first = rbln(args, cwd=tmp_path, env=rbln_env)
    check_ok(first)
    assert "[plan 2/2] tiny_qwen3 for RBLN-CA25 x1 (rbln): compiled" in first.stdout
    assert "2 cells: 0 compiled, 2 finalized" in first.stdout
    m = manifest(build)
    record = m["deployments"]["tiny_pair"]
    assert record["status"] == "ok" and record["fits"]
    plan = rbln(["plan", *args, "--json"], cwd=tmp_path, env=rbln_env)
    check_ok(plan)
    plan_data = json.loads(plan.stdout)
    assert plan_data["placement"] == PLACEMENT
    planned = {n: m for card in plan_data["per_card"] for n, m in card["models"].items()}
    assert {n: (m["kvcache_num_blocks"], m["memory_budget"]) for n, m in record["models"].items()} == {
        n: (m["kvcache_num_blocks"], m["memory_budget"]) for n, m in planned.items()
    }
    again = rbln(args, cwd=tmp_path, env=rbln_env)
    check_ok(again)
    assert "[plan" not in again.stdout and "2 cells: 0 compiled, 0 finalized, 2 skipped" in again.stdout
    # each model is served from its compiled cell, with the cell's tokenizer, on its planned card's devices
    proc = rbln(["serve-command", *args, "--json"], cwd=tmp_path, env=rbln_env)
    check_ok(proc)
    commands = json.loads(proc.stdout)["commands"]
    assert [c["model"] for c in commands] == ["tiny_llama", "tiny_qwen3"]
    sdk_on_path(monkeypatch)  # vllm-rbln's module imports optimum.rbln, which imports the (stand-in) compiler
    resolve = resolve_num_devices()  # vllm-rbln 0.12.0's own reading of rbln_config.json, from its wheel
    for c in commands:
        card = PLACEMENT[c["model"]]
        ids = record["cards"][card]["serve"]["device_ids"]
        assert (c["card"], c["device_ids"], ids) == (card, [card], [card])
        assert c["env"] == {"VLLM_RBLN_USE_VLLM_MODEL": "0", "RBLN_VISIBLE_DEVICES": str(card)}
        assert c["shell"].startswith(f"VLLM_RBLN_USE_VLLM_MODEL=0 RBLN_VISIBLE_DEVICES={card} vllm serve ")
        # the printed line is the JSON's command: its environment, then argv, word for word as a shell splits it
        words = shlex.split(c["shell"])
        assert sorted(words[:2]) == sorted(f"{k}={v}" for k, v in c["env"].items()) and words[2:] == c["argv"]
        assert c["exact"] and c["port"] == record["models"][c["model"]]["port"]
        entry = m["cells"][c["cell"]]
        artifact = build / "artifacts" / c["cell"]
        argv = c["argv"]
        assert argv[:2] == ["vllm", "serve"] and argv[3:5] == ["--port", str(c["port"])]
        assert argv[5] == "--tokenizer" and argv[6] == argv[2] and argv[2].endswith(f"artifacts/{c['cell']}")
        assert all((artifact / f).is_file() for f in TOKENIZER_FILES)  # the cell carries the tokenizer
        check_flags(argv, record_of(artifact), entry)
        config = json.loads((artifact / "rbln_config.json").read_text())
        flags = dict(zip(argv[5::2], argv[6::2], strict=True))
        assert resolve(config) == int(flags["--rbln-num-devices-per-local-rank"]) == 1
        assert config["kvcache_num_blocks"] == record["models"][c["model"]]["kvcache_num_blocks"]
    text = rbln(["serve-command", *args], cwd=tmp_path, env=rbln_env)
    check_ok(text)
    assert "# tiny_qwen3: cell tiny_qwen3.atom_max.b" in text.stdout and ", card 1 (devices 1)" in text.stdout
