"""End to end, as a user runs it (slow): the wheel installed (not editable) into a fresh venv and
used on a project made by `rbln-build init`; a checkpoint saved by transformers, added with
`rbln-build recipe add`, built, run, edited."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def run(
    cmd: list[str], cwd: Path, code: int = 0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=1200, env=dict(env or os.environ, HF_HUB_OFFLINE="1")
    )
    assert proc.returncode == code, f"{cmd}: exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def _sources(dst: Path) -> Path:
    """The repository's tracked files, outside the repository (a wheel build writes build/ there)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, files):
        rel = name.decode()
        if (REPO / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dst / rel)
    return dst


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no system site-packages) with the wheel installed --no-deps. Its dependencies
    (torch, transformers, hydra, doit, ...) are this interpreter's, made visible through a .pth
    file: the test must not reach a package index, and copying torch would take minutes."""
    base = tmp_path_factory.mktemp("installed")
    src = _sources(base / "src")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(base / "dist"),
            str(src),
        ],
        cwd=base,
    )
    wheel = next((base / "dist").glob("rbln_build-*.whl"))
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(base / "venv")
    py = base / "venv" / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "zz_rbln_build_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        cwd=base,
    )
    where = run(
        [
            str(py),
            "-c",
            "import rbln_build, rbln_build.memory._shipped as s; print(rbln_build.__file__); print(s.shipped_dir('conf'))",
        ],
        cwd=base,
    ).stdout.split()
    assert where[0].startswith(str(site)) and where[1] == str(site / "rbln_build" / "_data" / "conf")
    return base / "venv" / "bin"


def test_wheel_init_build_status(installed: Path, tmp_path: Path) -> None:
    tool = str(installed / "rbln-build")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RBLN_BUILD_PROJECT")}
    empty = tmp_path / "empty"
    empty.mkdir()
    out = run([tool, "progress=false"], cwd=empty, env=env).stdout  # the default matrix, shipped in the wheel
    assert "18 cells:" in out and "0 failed," in out
    manifest = (empty / "build" / "manifest.json").read_text()
    assert str(tmp_path) not in manifest and str(installed.parent) not in manifest  # no absolute path
    run([tool, "init", "proj"], cwd=tmp_path, env=env)
    proj = tmp_path / "proj"
    run([tool, "progress=false"], cwd=proj, env=env)
    assert "4 up to date" in run([tool, "status"], cwd=proj, env=env).stdout
    main = proj / "conf" / "matrix" / "main.yaml"
    main.write_text(main.read_text().replace("budgets: [0.3, 0.5]", "budgets: [0.3, 0.4]"))
    out = run([tool, "status"], cwd=proj, code=1, env=env).stdout
    assert "budget changed: 0.5 -> 0.4" in out and "would re-resolve" in out


def test_a_checkpoint_from_save_pretrained(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    from rbln_build.backends.torch._runtime import load_artifact

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(config).eval()
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt, max_shard_size="100KB")  # sharded: an index and several files
    assert (ckpt / "model.safetensors.index.json").is_file()
    cli = [sys.executable, "-m", "rbln_build.cli"]
    run([*cli, "init", "proj"], cwd=tmp_path)
    proj = tmp_path / "proj"
    run([*cli, "recipe", "add", "tiny", "--from", str(ckpt)], cwd=proj)
    axes = ["matrix.models=[tiny]", "matrix.devices=[rebel100]", "matrix.budgets=[0.5]", "progress=false"]
    run([*cli, *axes], cwd=proj)
    artifact = load_artifact(proj / "build" / "artifacts" / "tiny.rebel100.b0.5")
    prompt = [5, 6, 7, 8, 9, 10]
    want = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=None)[
        0, len(prompt) :
    ]
    assert artifact.generate([prompt], max_new_tokens=12)[0] == want.tolist()
    run([*cli, "status", *axes], cwd=proj)
    shard = sorted(ckpt.glob("model-*.safetensors"))[-1]
    data = bytearray(shard.read_bytes())
    data[-2] ^= 1  # one byte of one weight
    shard.write_bytes(bytes(data))
    out = run([*cli, "status", *axes], cwd=proj, code=1).stdout
    assert "would compile" in out and "weights changed" in out
    run([*cli, *axes], cwd=proj)
    summary = json.loads((proj / "build" / "summary.json").read_text())
    assert summary["compiled"] == 1 and summary["redone_cells"] == ["tiny.rebel100.b0.5"]
