"""End to end (issue 19, checkpoint fidelity): a tiny Llama and a tiny Qwen3 checkpoint, each with a real
BPE tokenizer trained offline and a generation config with two eos ids and sampling defaults
(tests/_checkpoints.py) -> `rbln-build recipe add` -> a build with the torch backend and one with the
rbln backend (the real optimum-rbln 0.12.0, only `rebel` stood in) -> from each cell: the checkpoint's
tokenizer files and generation config byte for byte, AutoTokenizer loads a tokenizer equal to the
checkpoint's, the generation config keeps both eos ids, optimum-rbln loads every rbln cell with the
manifest's count, `python -m rbln_build.run CELL --prompt` prints transformers' greedy text, and
`serve-command CELL_DIR` passes the cell as --tokenizer (never `vllm serve None`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _checkpoints import EOS_IDS, GENERATION_DEFAULTS, PROMPT, checkpoint_files, greedy_text, make_checkpoint
from _rbln_sdk import needs_optimum_rbln, sdk_env, sdk_on_path

pytestmark = [pytest.mark.slow, pytest.mark.integration, needs_optimum_rbln]

MODELS = {"ck_llama": "llama", "ck_qwen3": "qwen3"}
MATRIX = "models: [ck_llama, ck_qwen3]\ndevices: [atom_max]\nbudgets: [null]\n"


def cli(args: list[str], cwd: Path, module: str = "rbln_build.cli", code: int = 0) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=dict(os.environ, **sdk_env()),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == code, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One project, both checkpoints added as recipes, built with each backend."""
    root = tmp_path_factory.mktemp("e2e") / "proj"
    cli(["init", str(root)], cwd=root.parent)
    checkpoints = {}
    for name, arch in MODELS.items():
        checkpoints[name] = make_checkpoint(root / "checkpoints" / arch, arch, seed=7)
        out = cli(["recipe", "add", name, "--from", f"checkpoints/{arch}", "--max-seq-len", "256"], cwd=root)
        assert "note:" not in out  # the checkpoint has a tokenizer: no warning
    (root / "conf" / "matrix" / "main.yaml").write_text(MATRIX)
    cli(["progress=false"], cwd=root)
    cli(["progress=false", "matrix.backend=rbln", "build_dir=build-rbln"], cwd=root)
    return {"root": root, "checkpoints": checkpoints}


def manifest(root: Path, build: str) -> dict[str, Any]:
    return json.loads((root / build / "manifest.json").read_text())["cells"]


@pytest.mark.parametrize("build", ["build", "build-rbln"])
def test_every_cell_carries_the_checkpoints_tokenizer_and_generation_config(project, build: str) -> None:
    from transformers import AutoTokenizer, GenerationConfig

    root = project["root"]
    cells = manifest(root, build)
    assert sorted(cells) == ["ck_llama.atom_max.bnone", "ck_qwen3.atom_max.bnone"]
    for cid, entry in cells.items():
        assert entry["status"] == "ok", entry["error"]
        checkpoint = project["checkpoints"][cid.split(".")[0]]
        cell = root / build / entry["artifact"]["path"]
        for name, data in checkpoint_files(checkpoint).items():
            assert (cell / name).read_bytes() == data, f"{cid}: {name}"
        record = json.loads((cell / "rbln-build.json").read_text())
        assert record["tokenizer"] == {"files": ["chat_template.jinja", "tokenizer.json", "tokenizer_config.json"]}
        assert record["generation_config"] == "generation_config.json"
        ours, theirs = AutoTokenizer.from_pretrained(str(cell)), AutoTokenizer.from_pretrained(str(checkpoint))
        assert ours.get_vocab() == theirs.get_vocab() and len(ours) == len(theirs)
        assert ours(PROMPT)["input_ids"] == theirs(PROMPT)["input_ids"]
        assert ours.all_special_tokens == theirs.all_special_tokens
        chat = [{"role": "user", "content": PROMPT}]
        assert ours.apply_chat_template(chat, tokenize=False) == theirs.apply_chat_template(chat, tokenize=False)
        generation = GenerationConfig.from_pretrained(str(cell))
        assert generation.eos_token_id == EOS_IDS
        assert {k: getattr(generation, k) for k in GENERATION_DEFAULTS} == GENERATION_DEFAULTS


def test_optimum_rbln_loads_every_rbln_cell_with_the_manifests_count_and_generation_config(project) -> None:
    root = project["root"]
    with pytest.MonkeyPatch.context() as mp:
        sdk_on_path(mp)
        from optimum.rbln import RBLNAutoModelForCausalLM

        for cid, entry in manifest(root, "build-rbln").items():
            cell = root / "build-rbln" / entry["artifact"]["path"]
            model = RBLNAutoModelForCausalLM.from_pretrained(str(cell), export=False, rbln_create_runtimes=False)
            assert model.rbln_config.kvcache_num_blocks == entry["kvcache_num_blocks"], cid
            assert model.generation_config.eos_token_id == EOS_IDS, cid


def test_run_prompt_gives_transformers_greedy_text(project) -> None:
    root = project["root"]
    for cid, entry in manifest(root, "build").items():
        cell = root / "build" / entry["artifact"]["path"]
        out = cli([str(cell), "--prompt", PROMPT, "--max-new-tokens", "8"], cwd=root, module="rbln_build.run")
        expected = greedy_text(project["checkpoints"][cid.split(".")[0]], PROMPT, 8)
        assert expected and out == expected + "\n", cid


def test_serve_command_takes_the_tokenizer_from_the_cell_and_refuses_a_program_without_a_model(project) -> None:
    root = project["root"]
    cell = root / "build-rbln" / "artifacts" / "ck_qwen3.atom_max.bnone"
    command = json.loads(cli(["serve-command", str(cell), "--json", "--port", "8100"], cwd=root))
    assert command["argv"][:7] == ["vllm", "serve", str(cell), "--port", "8100", "--tokenizer", str(cell)]
    assert "None" not in command["shell"]
    program = root / "build" / "artifacts" / "ck_qwen3.atom_max.bnone"
    err = cli(["serve-command", str(program)], cwd=root, code=2)
    assert "no hub model id" in err and "matrix.backend=rbln" in err and "vllm serve" not in err
