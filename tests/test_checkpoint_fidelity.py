"""A checkpoint's tokenizer and generation config in every cell (issue 19, items 1, 2 and 5):
`recipe add` copies them into the recipe (hashed into its content), both backends carry them byte for
byte and record them in rbln-build.json, a cell without one says so (and the rbln backend drops the
one-token tokenizer optimum-rbln's preprocessor step makes up for a Qwen3 config), quantization goes to
optimum-rbln as its rbln_config expects or is refused naming the recipe key, serve-command takes the
cell's tokenizer (a cell folder too) and refuses what it cannot serve, `run --prompt` says why a cell
without a tokenizer cannot take text."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from _checkpoints import TOKENIZER_FILES, checkpoint_files, make_checkpoint
from _rbln_sdk import needs_optimum_rbln, sdk_on_path
from _torch_cells import spec_for

from rbln_build.backends import get_backend
from rbln_build.errors import InputFailure, RecipeError, UserError
from rbln_build.memory import inspect_checkpoint
from rbln_build.memory._recipes import load_recipe
from rbln_build.scaffold._recipe import add_recipe
from rbln_build.scaffold._recipe import main as recipe_main

ALL_FILES = sorted([*TOKENIZER_FILES, "generation_config.json"])


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    made = {arch: make_checkpoint(root / arch, arch, seed=3) for arch in ("llama", "qwen3")}
    bare = root / "qwen3_bare"  # the same weights, no tokenizer, no generation config
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copyfile(made["qwen3"] / name, bare / name)
    made["qwen3_bare"] = bare
    return made


def recipe_of(checkpoint: Path, recipes: Path, name: str = "ck"):
    add_recipe(name, checkpoint, recipes, None, max_seq_len=256)
    return load_recipe(name, root=recipes)


def test_recipe_add_copies_the_tokenizer_and_generation_config_and_hashes_them(checkpoints, tmp_path) -> None:
    recipes = tmp_path / "recipes"
    recipe = recipe_of(checkpoints["llama"], recipes)
    assert recipe.tokenizer_files == tuple(sorted(TOKENIZER_FILES))
    assert recipe.generation_config == "generation_config.json"
    for name, data in checkpoint_files(checkpoints["llama"]).items():
        assert (recipes / "ck" / name).read_bytes() == data, name
    meta = yaml.safe_load((recipes / "ck" / "recipe.yaml").read_text())
    assert (
        meta["tokenizer"] == {"files": sorted(TOKENIZER_FILES)}
        and meta["generation_config"] == "generation_config.json"
    )
    before = recipe.content_hash
    path = recipes / "ck" / "tokenizer_config.json"
    path.write_bytes(path.read_bytes().replace(b"}", b' , "x": 1}', 1))
    assert load_recipe("ck", root=recipes).content_hash != before  # a tokenizer edit is a new compile key


def test_a_checkpoint_without_a_tokenizer_gives_a_recipe_that_says_so(checkpoints, tmp_path, capsys) -> None:
    code = recipe_main(["add", "bare", "--from", str(checkpoints["qwen3_bare"]), "--to", str(tmp_path / "recipes")])
    assert code == 0
    out = capsys.readouterr().out
    assert "has no tokenizer files" in out and '"tokenizer": null' in out
    recipe = load_recipe("bare", root=tmp_path / "recipes")
    assert recipe.tokenizer_files is None and recipe.generation_config is None
    assert sorted(p.name for p in (tmp_path / "recipes" / "bare").iterdir()) == ["config.json", "recipe.yaml"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("tokenizer: {files: [../tokenizer.json]}", r"tokenizer.files\[0\]: '../tokenizer.json' is not a file name"),
        ("tokenizer: {files: [missing.json]}", r"tokenizer.files\[0\]: .*missing.json is missing"),
        ("tokenizer: {files: [link.json]}", r"tokenizer.files\[0\]: .*link.json is a link"),
        ("tokenizer: tokenizer.json", r"tokenizer must be null or \{files: \[tokenizer.json, ...\]\}"),
        ("generation_config: config.json", "generation_config: 'config.json' is not a file name"),
    ],
)
def test_a_recipes_companion_files_are_checked_and_errors_name_the_key(checkpoints, tmp_path, entry, message) -> None:
    recipes = tmp_path / "recipes"
    recipe_of(checkpoints["llama"], recipes)
    (recipes / "ck" / "link.json").symlink_to(checkpoints["llama"] / "tokenizer.json")
    text = (recipes / "ck" / "recipe.yaml").read_text()
    meta = yaml.safe_load(text)
    meta.pop("tokenizer")
    meta.pop("generation_config")
    (recipes / "ck" / "recipe.yaml").write_text(yaml.safe_dump(meta) + entry + "\n")
    with pytest.raises(RecipeError, match=message):
        load_recipe("ck", root=recipes)


def _build(backend: str, spec, tmp: Path, blocks: int | None = None) -> Path:
    base, cell = tmp / backend / "base", tmp / backend / "cell"
    base.mkdir(parents=True)
    cell.mkdir()
    result = get_backend(backend).compile(spec, base)
    get_backend(backend).finalize(spec, base, blocks or result.report.current_blocks, cell)
    return cell


def test_torch_cells_carry_the_files_byte_for_byte_and_record_them(checkpoints, tmp_path, capsys) -> None:
    spec = spec_for(recipe_of(checkpoints["llama"], tmp_path / "recipes"))
    cell = _build("torch", spec, tmp_path, spec.attention.num_full_blocks)
    assert sorted(p.name for p in cell.iterdir()) == sorted(
        [*ALL_FILES, "config.json", "program.pt2", "rbln-build.json"]
    )
    for name, data in checkpoint_files(checkpoints["llama"]).items():
        assert (cell / name).read_bytes() == data, name
    record = json.loads((cell / "rbln-build.json").read_text())
    assert record["tokenizer"] == {"files": sorted(TOKENIZER_FILES)}
    assert (record["generation_config"], record["quantization"]) == ("generation_config.json", {"weight_bits": 16})
    assert sorted(record["data_files"]) == ALL_FILES
    # run --prompt checks those files before it loads them: a changed tokenizer is refused, named
    from rbln_build.run import main as run_main

    data = bytearray((cell / "tokenizer.json").read_bytes())
    data[-2] ^= 1
    (cell / "tokenizer.json").write_bytes(bytes(data))
    assert run_main([str(cell), "--prompt", "hello"]) == 2
    assert "tokenizer.json: sha256" in capsys.readouterr().err


def test_the_torch_backend_never_runs_float_weights_as_a_quantized_variant(checkpoints, tmp_path) -> None:
    spec = spec_for(replace(recipe_of(checkpoints["llama"], tmp_path / "recipes"), weight_bits=8))
    (tmp_path / "base").mkdir()
    with pytest.raises(InputFailure, match=r"recipe.yaml: variant w8, but its weights are float") as info:
        get_backend("torch").compile(spec, tmp_path / "base")
    assert info.value.kind == "quantization_unsupported"


@pytest.fixture(scope="module")
def sdk():
    with pytest.MonkeyPatch.context() as mp:
        yield sdk_on_path(mp)


@needs_optimum_rbln
def test_an_rbln_cell_without_a_tokenizer_has_none_not_a_made_up_one(sdk, checkpoints, tmp_path) -> None:
    from optimum.rbln.utils.save_utils import maybe_load_preprocessors

    # what optimum-rbln's preprocessor step finds in a Qwen3 folder with no tokenizer: a one-token one
    assert {len(p) for p in maybe_load_preprocessors(str(checkpoints["qwen3_bare"]))} == {1}
    spec = spec_for(recipe_of(checkpoints["qwen3_bare"], tmp_path / "recipes"))
    cell = _build("rbln", spec, tmp_path)
    names = {p.name for p in cell.iterdir()}
    assert not names & {
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.json",
        "merges.txt",
        "special_tokens_map.json",
    }
    record = json.loads((cell / "rbln-build.json").read_text())
    assert record["tokenizer"] is None
    # optimum-rbln's own generation config (rebuilt from config.json) is kept when the checkpoint has none
    assert record["generation_config"] == "generation_config.json" and "generation_config.json" in names


@needs_optimum_rbln
def test_an_rbln_cell_carries_the_checkpoints_files_where_optimum_rbln_saves_them(sdk, checkpoints, tmp_path) -> None:
    from optimum.rbln import RBLNAutoModelForCausalLM

    spec = spec_for(recipe_of(checkpoints["qwen3"], tmp_path / "recipes"))
    cell = _build("rbln", spec, tmp_path)
    for name, data in checkpoint_files(checkpoints["qwen3"]).items():
        assert (cell / name).read_bytes() == data, name
    model = RBLNAutoModelForCausalLM.from_pretrained(str(cell), export=False, rbln_create_runtimes=False)
    assert model.generation_config.eos_token_id == [2, 3]


@needs_optimum_rbln
def test_rbln_quantization_is_refused_for_float_weights_and_passed_as_rbln_config_expects(
    sdk, checkpoints, tmp_path
) -> None:
    from optimum.rbln import RBLNQwen3ForCausalLMConfig
    from safetensors.torch import load_file, save_file

    from rbln_build.backends._rbln import _compile_options
    from rbln_build.quantization import Quantization
    from rbln_build.variants import write_quantized

    rebel, _ = sdk
    recipe = replace(recipe_of(checkpoints["qwen3"], tmp_path / "recipes"), weight_bits=8)
    first = len(rebel.COMPILES)
    (tmp_path / "base").mkdir()
    with pytest.raises(InputFailure, match=r"variant w8 \(int8 weights\), but weights.path .* holds unquantized"):
        get_backend("rbln").compile(spec_for(recipe), tmp_path / "base")
    assert len(rebel.COMPILES) == first  # refused before anything compiled
    # a float checkpoint with ONE stray scale is refused when read, naming the tensors it lacks
    stray = tmp_path / "stray"
    shutil.copytree(checkpoints["qwen3"], stray)
    tensors = load_file(str(stray / "model.safetensors"))
    name = "model.layers.0.mlp.up_proj.weight"
    tensors[name + "_scale"] = tensors[name].abs().amax(dim=1, keepdim=True) / 127
    save_file(tensors, str(stray / "model.safetensors"))
    with pytest.raises(RecipeError, match=r"integer or fp8 weights, but holds float ones: .*up_proj.weight \(F32\)"):
        inspect_checkpoint(stray)
    with pytest.raises(
        RecipeError, match=r"a scale \(weight_scale / scales / w_scale / scale\) for .*k_proj.weight_scale"
    ):
        add_recipe("stray", stray, tmp_path / "recipes", None, max_seq_len=256)
    # a checkpoint quantized in optimum-rbln's format (int8 weights with *.weight_scale tensors)
    for bits, weights in ((8, "int8"), (4, "int4")):
        quantized = tmp_path / f"quantized{bits}"
        shutil.copytree(checkpoints["qwen3"], quantized)
        write_quantized(checkpoints["qwen3"], quantized, Quantization(weights=weights))
        spec = spec_for(replace(recipe, weights_path=quantized, weight_bits=bits))
        options = _compile_options(spec)
        assert options["quantization"] == {
            "format": "rbln",
            "weights": weights,
            "activations": "fp16",
            "kv_caches": "fp16",
        }
        config = RBLNQwen3ForCausalLMConfig(**{k: v for k, v in options.items() if k != "create_runtimes"})
        assert config.quantization.nbits_per_param == bits  # optimum-rbln's own config takes it as is


def _serving(recipe, produced: str):
    from test_serving import ok

    from rbln_build.config._config import compose_settings
    from rbln_build.config._matrix import expand
    from rbln_build.pipeline._serving import serving_for

    cell = next(c for c in expand(compose_settings(["matrix=tiny"]), {"t": "t"}) if c.id.startswith("tiny_qwen3"))
    cell = replace(cell, recipe=recipe, spec=replace(cell.spec, recipe=recipe))
    return cell, serving_for(cell, ok(4, 10**9, produced=produced))


def test_serving_takes_the_tokenizer_from_the_cell_and_refuses_what_it_cannot_serve(checkpoints, tmp_path) -> None:
    from rbln_build.pipeline._serving import command_for

    recipe = recipe_of(checkpoints["qwen3"], tmp_path / "recipes")
    assert recipe.source.get("model_id") is None  # a local checkpoint: no hub id
    cell, rbln = _serving(recipe, "rbln")
    assert rbln["model"] == rbln["tokenizer"] == f"artifacts/{cell.id}" and rbln["refused"] is None
    argv = command_for(rbln, 8000, (0,), "build")["argv"]
    assert argv[:7] == [
        "vllm",
        "serve",
        f"build/artifacts/{cell.id}",
        "--port",
        "8000",
        "--tokenizer",
        f"build/artifacts/{cell.id}",
    ]
    _, program = _serving(recipe, "program")
    assert program["model"] is None and not program["exact"] and "no hub model id" in program["refused"]
    with pytest.raises(UserError, match="no serve command: cell .* no hub model id"):
        command_for(program, 8000, (0,), "build")
    bare = recipe_of(checkpoints["qwen3_bare"], tmp_path / "recipes", "bare")
    _, none = _serving(bare, "rbln")
    assert none["tokenizer"] is None and "carries no tokenizer" in none["refused"]
    hub = replace(bare, source={"model_id": "Qwen/Qwen3-0.6B"})
    _, from_hub = _serving(hub, "rbln")
    assert from_hub["tokenizer"] == "Qwen/Qwen3-0.6B" and from_hub["refused"] is None


def test_serve_command_takes_a_built_or_a_released_cell_folder(checkpoints, tmp_path, capsys) -> None:
    from rbln_build.inspection._deploy import main as deploy_main

    cell, serving = _serving(recipe_of(checkpoints["qwen3"], tmp_path / "recipes"), "rbln")
    entry = {"cell": cell.id, "status": "ok", "serving": serving}
    built = tmp_path / "build" / "artifacts" / cell.id
    built.mkdir(parents=True)
    (built / "rbln-build.json").write_text("{}")
    (tmp_path / "build" / "manifest.json").write_text(json.dumps({"cells": {cell.id: entry}}))
    released = tmp_path / "release" / cell.id
    shutil.copytree(built, released)
    (tmp_path / "release" / "release.json").write_text(
        json.dumps({"cells": {cell.id: {"dir": cell.id, "record": entry}}})
    )
    assert deploy_main(["serve-command", str(built), "--json"]) == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[:7] == ["vllm", "serve", str(built), "--port", "8000", "--tokenizer", str(built)]
    # a release.json written by hand (no self-hash) is refused, as run refuses it; a real release's cell
    # is served after its check (tests/test_release_ops.py)
    from rbln_build.errors import IntegrityError

    with pytest.raises(IntegrityError, match="does not match its content"):
        deploy_main(["serve-command", str(released), "--json"])
    alone = tmp_path / "alone" / cell.id
    shutil.copytree(built, alone)
    assert deploy_main(["serve-command", str(alone)]) == 2
    assert "records cell" in capsys.readouterr().err
    assert deploy_main(["serve-command", str(tmp_path)]) == 2
    assert "no rbln-build.json; pass a cell folder" in capsys.readouterr().err
    # a release's or a build directory's root: the error names a cell folder to pass instead
    assert deploy_main(["serve-command", str(tmp_path / "release")]) == 2
    err = capsys.readouterr().err
    assert f"it is a release, not a cell: pass one of its cell folders ({cell.id}), e.g. {released}." in err
    assert deploy_main(["serve-command", str(tmp_path / "build")]) == 2
    assert f"it is a build directory, not a cell: pass {tmp_path / 'build' / 'artifacts'}/<cell id>" in (
        capsys.readouterr().err
    )
    with pytest.MonkeyPatch.context() as mp:  # '.' inside a cell folder names that cell
        mp.chdir(built)
        assert deploy_main(["serve-command", ".", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["cell"] == cell.id
        assert out["argv"][:7] == ["vllm", "serve", ".", "--port", "8000", "--tokenizer", "."]


def test_run_prompt_on_a_cell_without_a_tokenizer_says_why(capsys) -> None:
    from _torch_cells import finalized

    from rbln_build.run import main as run_main

    cell = finalized("tiny_llama", 8)  # seeded weights: no tokenizer
    assert run_main([str(cell), "--prompt", "hello"]) == 2
    err = capsys.readouterr().err
    assert 'carries no tokenizer (rbln-build.json: "tokenizer": null' in err and "--prompt-ids" in err


def test_recipe_add_copies_linked_files_as_files(checkpoints, tmp_path) -> None:
    """A Hugging Face cache snapshot links every file to a blob: the recipe gets the bytes, not the link."""
    snapshot, blobs = tmp_path / "snapshot", tmp_path / "blobs"
    blobs.mkdir()
    snapshot.mkdir()
    for item in checkpoints["llama"].iterdir():
        shutil.copyfile(item, blobs / item.name)
        (snapshot / item.name).symlink_to(blobs / item.name)
    recipe = recipe_of(snapshot, tmp_path / "recipes")
    assert recipe.tokenizer_files == tuple(sorted(TOKENIZER_FILES)) and recipe.generation_config
    for name, data in checkpoint_files(checkpoints["llama"]).items():
        copied = tmp_path / "recipes" / "ck" / name
        assert not copied.is_symlink() and copied.read_bytes() == data, name
