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


def test_released_to_a_folder_and_s3_every_cell_works_from_the_release_alone(project, tmp_path, s3) -> None:
    """The release half (issue 19, 19b): both builds released to a folder and to S3 (moto on 127.0.0.1),
    the build dirs deleted, verify passes on both, and from the releases alone: the checkpoint's tokenizer
    and generation config byte for byte, AutoTokenizer equal to the checkpoint's, both eos ids, optimum-rbln
    loads every rbln cell with the manifest's count, `run --prompt` gives transformers' greedy text, and
    each card holds the cell's serve command (or the reason there is none)."""
    import shutil

    from test_cli import check_ok, rbln
    from transformers import AutoTokenizer, GenerationConfig

    env, fs, _ = s3
    root, out, url = project["root"], tmp_path / "releases", "s3://rbln-cache/ck-releases"
    for build in ("build", "build-rbln"):
        copy = tmp_path / build  # the fixture's build dirs stay for the other tests; this copy is deleted
        shutil.copytree(root / build, copy, symlinks=True)
        for to in (str(out), url):
            check_ok(rbln(["release", build, "--build-dir", str(copy), "--to", to], cwd=root, env=env))
        shutil.rmtree(copy)
    for build in ("build", "build-rbln"):
        check_ok(rbln(["verify", str(out / build)], cwd=tmp_path))
        check_ok(rbln(["verify", f"{url}/{build}"], cwd=tmp_path, env=env))
        assert (
            fs.cat_file(f"rbln-cache/ck-releases/{build}/release.json") == (out / build / "release.json").read_bytes()
        )
    for build in ("build", "build-rbln"):
        cells = json.loads((out / build / "release.json").read_bytes())["cells"]
        assert sorted(cells) == ["ck_llama.atom_max.bnone", "ck_qwen3.atom_max.bnone"]
        for cid, cell in cells.items():
            folder = out / build / cell["dir"]
            checkpoint = project["checkpoints"][cid.split(".")[0]]
            for name, data in checkpoint_files(checkpoint).items():
                assert (folder / name).read_bytes() == data, f"{build}/{cid}: {name}"
            ours, theirs = AutoTokenizer.from_pretrained(str(folder)), AutoTokenizer.from_pretrained(str(checkpoint))
            assert ours.get_vocab() == theirs.get_vocab() and len(ours) == len(theirs)
            assert GenerationConfig.from_pretrained(str(folder)).eos_token_id == EOS_IDS
            card = (folder / "README.md").read_text()
            assert "`tokenizer.json`" in card and "| generation config | `generation_config.json` |" in card
            assert "| requested budget | null (all available DRAM) = " in card  # the cells are bnone
            assert f"weights `{cell['record']['inputs']['weights_hash']}`" in card and "sha256 `sha256:" not in card
            if build == "build":
                text = cli(
                    [str(folder), "--prompt", PROMPT, "--max-new-tokens", "8"], cwd=tmp_path, module="rbln_build.run"
                )
                assert text == greedy_text(checkpoint, PROMPT, 8) + "\n", cid
                assert f'python -m rbln_build.run {cid} --prompt "Hello" --max-new-tokens 8' in card
                assert "No serve command: " in card and "no hub model id" in card and "vllm serve" not in card
            else:
                assert f"vllm serve ./{cid} --port 8000 --tokenizer ./{cid} " in card
                assert f'RBLNLlamaForCausalLM.from_pretrained("{cid}"' in card or "RBLNQwen3ForCausalLM" in card
    with pytest.MonkeyPatch.context() as mp:
        sdk_on_path(mp)
        from optimum.rbln import RBLNAutoModelForCausalLM

        for cid, cell in json.loads((out / "build-rbln" / "release.json").read_bytes())["cells"].items():
            folder = out / "build-rbln" / cell["dir"]
            model = RBLNAutoModelForCausalLM.from_pretrained(str(folder), export=False, rbln_create_runtimes=False)
            assert model.rbln_config.kvcache_num_blocks == cell["record"]["kvcache_num_blocks"], cid
            assert model.generation_config.eos_token_id == EOS_IDS, cid


try:  # moto's S3 server on 127.0.0.1, the remote cache tests' fixture
    from test_remote import s3  # noqa: F401
except pytest.skip.Exception:

    @pytest.fixture
    def s3() -> Any:
        pytest.skip("fsspec is not installed (pip install 'rbln-build[remote]')")
