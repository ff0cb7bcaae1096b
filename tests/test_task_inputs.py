"""Compile tasks carry their inputs by content (execution/_task_inputs.py, store/_remote_inputs.py):
the driver packs a recipe's files and a local checkpoint's weights (on a file:// remote cache, by
sha256); a worker materializes them in its own folder after the driver's folders are gone, checks
them against the compile key's digests, and refuses anything altered. No Ray here (the remote path
of the weights); tests/test_ray_isolated.py runs the real thing on a two-node cluster."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from test_checkpoint import CONFIG, checkpoint

from rbln_build.errors import IntegrityError
from rbln_build.estimator import resolve_npu
from rbln_build.execution import StoreRef
from rbln_build.execution._input_digests import file_digests, weights_digest
from rbln_build.execution._task_inputs import (
    InputPacker,
    PluginSource,
    driver_text,
    materialize,
    plugin_loaded,
    recipe_digest,
)
from rbln_build.memory import CompileSpec, inspect_checkpoint
from rbln_build.memory._recipes import load_recipe
from rbln_build.store import RemoteStore

RECIPE = "name: ck\nweights: {path: ../../ck}\ndtype: float32\nbuild: {batch_size: 1, max_seq_len: 128}\n"
RECIPE += "tokenizer: {files: [tokenizer.json]}\ngeneration_config: generation_config.json\n"


def _project(root: Path, sharded: bool = False) -> Path:
    checkpoint(root / "ck", sharded=sharded)
    folder = root / "recipes" / "ck"
    folder.mkdir(parents=True)
    (folder / "recipe.yaml").write_text(RECIPE)
    (folder / "config.json").write_text(__import__("json").dumps(CONFIG))
    (folder / "tokenizer.json").write_text('{"version": "1.0"}')
    (folder / "generation_config.json").write_text('{"eos_token_id": [2, 3]}')
    return root / "recipes"


def _spec(recipes: Path) -> CompileSpec:
    return CompileSpec.for_recipe(load_recipe("ck", recipes), resolve_npu("RBLN-CR"))


@pytest.mark.parametrize("sharded", [False, True])
def test_a_worker_compiles_from_the_content_after_the_driver_folders_are_gone(tmp_path: Path, sharded: bool) -> None:
    driver = tmp_path / "driver"
    spec = _spec(_project(driver, sharded))
    remote = tmp_path / "remote"
    ref = StoreRef(str(tmp_path / "cache"), f"file://{remote}")
    packer = InputPacker(ref, ray=None)  # a writable remote: no object store needed
    inputs = packer.pack(spec, "torch")
    again = packer.pack(spec, "torch")
    assert again == inputs and packer.uploaded == (3 if sharded else 1)  # each weight file once
    assert sorted(p.name for p in (remote / "inputs").iterdir()) == sorted(w.sha256 for w in inputs.weights)
    assert inputs.plugin is None  # a built-in backend: the worker's own rbln-build is the keyed code

    originals = {p.name: p.read_bytes() for p in (driver / "ck").iterdir()}
    shutil.move(str(driver), str(tmp_path / "moved-away"))  # the worker cannot see the driver's folders
    worker = StoreRef(str(tmp_path / "worker-cache"), f"file://{remote}").open(lambda _m: None)
    local = materialize(inputs, spec, tmp_path / "work", worker)

    assert local.key_fields() == spec.key_fields()  # the compile key is the same
    assert local.recipe.directory == tmp_path / "work" / "recipe" / "ck"
    assert (local.recipe.directory / "tokenizer.json").read_text() == '{"version": "1.0"}'
    assert local.recipe.weights_path is not None
    for name, data in originals.items():
        if name != "config.json":  # the checkpoint's own config.json is no input (the recipe's is)
            assert (local.recipe.weights_path / name).read_bytes() == data


def test_the_rbln_backends_compile_folder_reads_only_the_workers_copy(tmp_path: Path) -> None:
    """optimum-rbln compiles from a folder of links (backends/_rbln.py): on a worker they point into
    the worker's materialized inputs, never at the driver's recipe or checkpoint."""
    from rbln_build.backends._rbln import _checkpoint_dir

    driver = tmp_path / "driver"
    spec = _spec(_project(driver))
    remote = tmp_path / "remote"
    inputs = InputPacker(StoreRef(str(tmp_path / "cache"), f"file://{remote}"), ray=None).pack(spec, "rbln")
    shutil.move(str(driver), str(tmp_path / "moved-away"))
    work = tmp_path / "work"
    local = materialize(inputs, spec, work, RemoteStore(tmp_path / "worker-cache", f"file://{remote}"))
    folder = tmp_path / "compile-from"
    folder.mkdir()
    _checkpoint_dir(local, folder)
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json"]
    for p in folder.iterdir():
        assert p.resolve().is_relative_to(work) or not p.is_symlink(), p
        assert p.read_bytes()  # every link resolves


def test_the_digests_are_the_ones_load_recipe_computes(tmp_path: Path) -> None:
    recipe = load_recipe("ck", _project(tmp_path))
    files = {n: (recipe.directory / n).read_bytes() for n in ("recipe.yaml", "config.json")}
    companions = [(n, (recipe.directory / n).read_bytes()) for n in ("tokenizer.json", "generation_config.json")]
    assert recipe_digest(files["recipe.yaml"], files["config.json"], companions) == recipe.content_hash
    assert recipe.weights_path is not None
    assert weights_digest(file_digests(inspect_checkpoint(recipe.weights_path))) == recipe.weights_hash


def test_altered_inputs_are_refused_and_messages_name_the_drivers_paths(tmp_path: Path) -> None:
    spec = _spec(_project(tmp_path / "driver"))
    remote = tmp_path / "remote"
    inputs = InputPacker(StoreRef(str(tmp_path / "cache"), f"file://{remote}"), ray=None).pack(spec, "torch")
    worker = RemoteStore(tmp_path / "worker-cache", f"file://{remote}")

    blob = remote / "inputs" / inputs.weights[0].sha256
    blob.write_bytes(blob.read_bytes()[:-1] + b"\x01")  # same size, one byte flipped
    with pytest.raises(IntegrityError, match=r"/ck/model.safetensors: the copy fetched from .* does not match"):
        materialize(inputs, spec, tmp_path / "w1", worker)
    blob.unlink()
    with pytest.raises(IntegrityError, match="is missing on the remote cache"):
        materialize(inputs, spec, tmp_path / "w2", worker)

    edited = type(inputs)(
        tuple((n, d + b"\n" if n == "config.json" else d) for n, d in inputs.files),
        inputs.weights,
        inputs.recipe_dir,
        inputs.weights_dir,
    )
    with pytest.raises(IntegrityError, match="the recipe's files changed after this build read them"):
        materialize(edited, spec, tmp_path / "w3", worker)
    escaping = type(inputs)((("../recipe.yaml", b""),), (), inputs.recipe_dir, None)
    with pytest.raises(IntegrityError, match="names a recipe file '../recipe.yaml'"):
        materialize(escaping, spec, tmp_path / "w4", worker)

    work = tmp_path / "w5"
    said = f"{work / 'recipe' / 'ck' / 'recipe.yaml'}: bad; {work / 'weights'}/model.safetensors: bad"
    assert driver_text(said, work, inputs) == (
        f"{inputs.recipe_dir}/recipe.yaml: bad; {inputs.weights_dir}/model.safetensors: bad"
    )


def test_a_plug_in_backend_runs_from_the_shipped_source_and_leaves_the_process_as_it_was(tmp_path: Path) -> None:
    from rbln_build.backends import get_backend

    source = b"from rbln_build.backends.torch._export import TorchExportBackend\n\n"
    source += b"class Shipped(TorchExportBackend):\n    name = 'shipped'\n"
    plugin = PluginSource("team_plugins.shipped_backend", source)
    assert "team_plugins" not in sys.modules
    with plugin_loaded(plugin, tmp_path):
        assert type(get_backend("team_plugins.shipped_backend:Shipped")).__name__ == "Shipped"
    assert "team_plugins" not in sys.modules and "team_plugins.shipped_backend" not in sys.modules
