"""A release as Hub model repos, end to end (issue 33, items 4 and 5): a checkpoint with a licence (its
LICENSE file and the `license:` of its README.md front matter) -> `recipe add` -> an rbln build (the real
optimum-rbln 0.12.0, only `rebel` stood in) on 1 and 4 devices -> `release --layout hub` -> the build
directory deleted -> each cell folder as a Hub repo: its card's front matter read by huggingface_hub, the
licence carried byte for byte, the cell verified alone, a huggingface_hub cache snapshot made from it
and loaded by repo id with HF_HUB_OFFLINE=1 (optimum-rbln's RBLNAutoModelForCausalLM, AutoTokenizer,
GenerationConfig), and serve-command of the downloaded copy pinning the device count vllm-rbln reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _checkpoints import EOS_IDS, make_checkpoint
from _hub import LOAD, snapshot
from _rbln_sdk import needs_optimum_rbln, sdk_env

from rbln_build.release import SELF_HASH_KEY, self_hash

pytestmark = [pytest.mark.slow, pytest.mark.integration, needs_optimum_rbln]

LICENSE_TEXT = "Apache License\nVersion 2.0, January 2004\n(the checkpoint's licence text)\n"
README = "---\nlicense: apache-2.0\nlanguage: [en]\n---\n# A tiny checkpoint\n"
MATRIX = "models: [ck]\ndevices: [atom_max, atom_max_x4]\nbudgets: [null]\n"
CELLS = {"ck.atom_max.bnone": 1, "ck.atom_max_x4.bnone": 4}


def cli(args: list[str], cwd: Path, code: int = 0, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "rbln_build.cli", *args],
        cwd=cwd,
        env=dict(os.environ, **sdk_env(), **(env or {})),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == code, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("hub") / "proj"
    cli(["init", str(root)], cwd=root.parent)
    checkpoint = make_checkpoint(root / "checkpoints" / "llama", "llama", seed=3)
    (checkpoint / "LICENSE").write_text(LICENSE_TEXT)
    (checkpoint / "README.md").write_text(README)
    cli(["recipe", "add", "ck", "--from", "checkpoints/llama", "--max-seq-len", "256"], cwd=root)
    (root / "conf" / "matrix" / "main.yaml").write_text(MATRIX)
    cli(["progress=false", "matrix.backend=rbln"], cwd=root)
    out = cli(["release", "h1", "--layout", "hub", "--hub-org", "my-org", "--to", str(root / "shipped")], cwd=root)
    shutil.rmtree(root / "build")
    return {"root": root, "release": root / "shipped" / "h1", "stdout": out}


def test_the_recipe_and_every_cell_carry_the_checkpoints_licence(released) -> None:
    from huggingface_hub import ModelCard

    root, release = released["root"], released["release"]
    recipe = (root / "recipes" / "ck" / "recipe.yaml").read_text()
    assert "license:\n  id: apache-2.0\n  file: LICENSE\nlanguage:\n- en\n" in recipe
    for cid in CELLS:
        assert f"huggingface-cli upload my-org/{cid} {release}/{cid} ." in released["stdout"]
        cell = release / cid
        assert (cell / "LICENSE").read_text() == LICENSE_TEXT
        record = json.loads((cell / "rbln-build.json").read_text())
        assert record["license"] == {"id": "apache-2.0", "file": "LICENSE"} and "LICENSE" in record["data_files"]
        assert "base_model" not in record  # the checkpoint names no hub model: none is made up
        assert record["language"] == ["en"]
        card = ModelCard.load(cell / "README.md")
        assert card.data.to_dict() == {
            "library_name": "optimum-rbln",
            "pipeline_tag": "text-generation",
            "license": "apache-2.0",
            "language": ["en"],  # the checkpoint README's, through the recipe
            "tags": ["rbln-build", "rebellions", "RBLN-CA25", "rbln-build-rbln", "optimum-rbln"],
        }
        assert f"huggingface-cli download my-org/{cid} --local-dir {cid}" in card.text


def test_each_cell_loads_by_repo_id_from_a_hub_cache_snapshot_offline(released, tmp_path) -> None:
    release = released["release"]
    cache = tmp_path / "hub-cache"
    for cid in CELLS:
        snapshot(cache, f"my-org/{cid}", release / cid)
    env = {
        **os.environ,
        **sdk_env(),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(cache),
        "HF_HOME": str(tmp_path / "hf"),
    }
    repos = [f"my-org/{cid}" for cid in CELLS]
    proc = subprocess.run(
        [sys.executable, "-c", LOAD, *repos], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    body = json.loads((release / "release.json").read_text())
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(release / next(iter(CELLS))))("Hello there")["input_ids"]
    for cid in CELLS:
        count = body["cells"][cid]["record"]["kvcache_num_blocks"]
        assert loaded[f"my-org/{cid}"] == [count, ids, EOS_IDS], cid


def test_a_downloaded_cell_verifies_alone_and_serves_on_the_device_count_vllm_rbln_reads(released, tmp_path) -> None:
    root, release = released["root"], released["release"]
    for cid, devices in CELLS.items():
        copy = tmp_path / cid  # as `huggingface-cli download my-org/<cid> --local-dir <cid>` leaves it
        shutil.copytree(release / cid, copy)
        (copy / ".cache" / "huggingface").mkdir(parents=True)
        (copy / ".cache" / "huggingface" / ".gitignore").write_text("*\n")
        assert "match rbln-build-files.json" in cli(["verify", cid], cwd=tmp_path)
        command = json.loads(cli(["serve-command", cid, "--json"], cwd=tmp_path))
        ids = ",".join(str(i) for i in range(devices))
        assert command["env"] == {"VLLM_RBLN_USE_VLLM_MODEL": "0", "RBLN_VISIBLE_DEVICES": ids}
        assert command["argv"][:3] == ["vllm", "serve", cid] and command["argv"][5:7] == ["--tokenizer", cid]
        flags = dict(zip(command["argv"][7::2], command["argv"][8::2], strict=True))
        assert flags["--rbln-num-devices-per-local-rank"] == str(devices)
        config = json.loads((copy / "rbln_config.json").read_text())
        assert {c["num_devices"] for c in config["_compile_cfgs"]} == {devices}
    # a 4-device cell whose rbln_config.json lost its count (as optimum-rbln's own resize writes it) is refused
    copy = tmp_path / "ck.atom_max_x4.bnone"
    config = json.loads((copy / "rbln_config.json").read_text())
    for entry in config["_compile_cfgs"]:
        entry["num_devices"] = None
    edited = json.dumps(config).encode()
    (copy / "rbln_config.json").write_bytes(edited)
    # as edited, it no longer matches the cell's integrity file: refused before anything in it is read
    err = cli(["serve-command", str(copy)], cwd=root, code=2)
    assert "rbln_config.json: changed" in err and "does not match" in err and "vllm serve" not in err, err
    # re-listed in the integrity file (as a hand-made cell would be): the device count itself is refused
    files = json.loads((copy / "rbln-build-files.json").read_text())
    files["files"]["rbln_config.json"] = {"sha256": hashlib.sha256(edited).hexdigest(), "size": len(edited)}
    files[SELF_HASH_KEY] = self_hash(files)
    (copy / "rbln-build-files.json").write_text(json.dumps(files))
    assert "match rbln-build-files.json" in cli(["verify", str(copy)], cwd=root)
    err = cli(["serve-command", str(copy)], cwd=root, code=2)
    assert "compiled for 4 device(s)" in err and "vllm serve" not in err
