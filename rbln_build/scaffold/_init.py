"""``rbln-build init [DIR]``: scaffold a project that builds as it stands.

    DIR/rbln-build.yaml               the project marker (rbln-build finds it from any subfolder)
    DIR/conf/config.yaml              the root config: which matrix, where the build goes
    DIR/conf/matrix/main.yaml         one matrix: your model on your device and a shipped one
    DIR/conf/device/my_device.yaml    a device target
    DIR/conf/model/my_llama.yaml      the model config that points at the recipe
    DIR/recipes/my_llama/             recipe.yaml (commented) + config.json (a tiny Llama)
    DIR/.gitignore                    the build directory

The recipe generates its weights from a seed, so ``cd DIR && rbln-build`` builds real programs at
once; ``rbln-build recipe add NAME --from CHECKPOINT`` adds a recipe for your own weights. Nothing
existing is ever overwritten: if any of these files exists, nothing is written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..config import MARKER
from ..errors import ConfigError, InputError
from ..memory import shipped_dir

__all__ = ["scaffold", "main"]

_MARKER = """\
# This folder is an rbln-build project: `rbln-build` run here (or in any subfolder) layers conf/ and
# recipes/ over the configs and recipes shipped with rbln-build. A file here wins over a shipped file of
# the same name; the shipped devices, models and matrices stay available (e.g. device=rebel100).
conf: conf         # Hydra config groups: matrix/, model/, device/ (and config.yaml, the root)
recipes: recipes   # recipes/<name>/recipe.yaml + config.json
"""

# The keys below the defaults are the shipped root config's (every key, each with its comment), so a
# project accepts every override a clone does; only build_dir and recipes_dir say what they mean here.
_ROOT_CONFIG = """\
# The project's root config. `rbln-build --help` lists the groups and the overrides.
defaults:
  - rbln_build_schema            # the typed schema (every key is checked at composition)
  - matrix: main                 # conf/matrix/main.yaml
  - model: null                  # `model=<name>` narrows the matrix to one model
  - device: null                 # `device=<name>` narrows the matrix to one device
  - deployment: null             # `deployment=<name>`: models sharing one target (conf/deployment/)
  - executor: local              # where compile keys run: local processes, or executor=ray
  - override hydra/job_logging: none
  - override hydra/hydra_logging: none
  - _self_

{keys}
hydra:
  job:
    chdir: false
  output_subdir: null
  run:
    dir: .
  sweep:
    dir: ${build_dir}/hydra
    subdir: .
"""

_MATRIX = """\
# What to build: every model x device x budget (budgets vary fastest). Cell ids read
# <model>.<device>.b<budget>, e.g. my_llama.my_device.b0.5.
models: [my_llama]              # conf/model/<name>.yaml (yours first, then the shipped ones)
devices: [my_device, rebel100]  # conf/device/<name>.yaml: rebel100 is shipped with rbln-build
budgets: [0.3, 0.5]             # memory_budget per device: a fraction, "50%", bytes, "10GB" or null
# expect_failure:               # cells declared not to build (they then do not fail the run)
#   - cell: my_llama.my_device.b0.3
#     kind: insufficient_memory
"""

_DEVICE = """\
# A device target: the NPU (RBLN-CA* = ATOM-Max, RBLN-CR* = Rebel100-class) and how many devices
# the model is split over (tensor parallel). The budget applies to each device.
npu: RBLN-CA25
num_devices: 2
"""

_MODEL = """\
# A model config: the recipe (recipes/<name>/) and build options that override the recipe's `build:`.
recipe: my_llama
# batch_size: 4
# max_seq_len: 4096
"""

_RECIPE = """\
# A recipe: the model's HF config.json (beside this file) and how to build it.
name: my_llama                  # must equal the folder name
family: llama
source:
  model_id: my-org/my-llama     # where the model comes from (informational; nothing is downloaded)
  revision: null
# Weights: {seed: N} generates them deterministically (this scaffold: a tiny random Llama);
# {path: DIR} reads a local HF checkpoint (config.json + *.safetensors, relative to this folder);
# null builds a plan (the resolved kvcache_num_blocks from the NPU memory model, no program).
# `rbln-build recipe add NAME --from DIR` writes a recipe for a checkpoint.
weights:
  seed: 1234
dtype: float32                  # float32, float16 or bfloat16
quantization:
  weight_bits: 16
build:                          # default build options (a model config or the matrix may override them)
  batch_size: 2
  max_seq_len: 4096             # tokens
  attn_impl: flash_attn
  kvcache_partition_len: 1024   # tokens
"""

_GITIGNORE = """\
# rbln-build outputs (manifest, artifacts, cache, doit state): rebuilt by `rbln-build`
/build/
# private signing keys (rbln-build release --sign): keep them outside the project; never commit one
*.key
*.pem
"""


def _root_keys() -> str:
    """The shipped root config's keys (``build_dir:`` up to ``hydra:``), with the two whose meaning
    differs in a project reworded."""
    shipped = (shipped_dir("conf") / "config.yaml").read_text(encoding="utf-8")
    keys = shipped[shipped.index("\nbuild_dir:") + 1 : shipped.index("\nhydra:") + 1]
    lines = []
    for line in keys.splitlines(keepends=True):
        if line.startswith("build_dir:"):
            line = "build_dir: build                 # relative to this project's root (rbln-build.yaml's folder)\n"
        elif line.startswith("recipes_dir:"):
            line = "recipes_dir: null                # null: this project's recipes/, then the shipped ones\n"
        lines.append(line)
    return "".join(lines)


def _files() -> dict[str, bytes]:
    config = (shipped_dir("recipes") / "tiny_llama" / "config.json").read_bytes()
    return {
        MARKER: _MARKER.encode(),
        "conf/config.yaml": _ROOT_CONFIG.replace("{keys}\n", _root_keys()).encode(),
        "conf/matrix/main.yaml": _MATRIX.encode(),
        "conf/device/my_device.yaml": _DEVICE.encode(),
        "conf/model/my_llama.yaml": _MODEL.encode(),
        "recipes/my_llama/recipe.yaml": _RECIPE.encode(),
        "recipes/my_llama/config.json": config,
        ".gitignore": _GITIGNORE.encode(),
    }


def scaffold(root: Path) -> list[Path]:
    """Write the project into ``root`` (created if needed); refuse if any file already exists."""
    files = _files()
    existing = [rel for rel in files if (root / rel).exists() or (root / rel).is_symlink()]
    if existing:
        raise ConfigError(
            f"{root}: {', '.join(existing)} already exist(s); `rbln-build init` never overwrites anything. "
            "Choose an empty or new folder."
        )
    written: list[Path] = []
    try:
        for rel, data in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "xb") as f:  # exclusive: a file that appeared meanwhile is not overwritten
                written.append(path)
                f.write(data)
    except OSError as exc:  # a folder that cannot be written, a file where a folder belongs, a loop
        for path in written:  # only what this call created
            path.unlink(missing_ok=True)
        where = exc.filename or root
        raise InputError(
            f"{root}: cannot write the project ({exc.strerror or exc}: {where}); choose a new or empty, writable folder."
        ) from None
    return written


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    argv = [a for a in argv if a != "--json"]
    if any(a in ("-h", "--help") for a in argv) or len(argv) > 1:
        print(
            "usage: rbln-build init [DIR] [--json]   scaffold an rbln-build project in DIR (default: the current "
            "folder); --json: what was created, as JSON",
            file=sys.stderr if len(argv) > 1 else sys.stdout,
        )
        return 0 if len(argv) <= 1 else 2
    root = Path(argv[0] if argv else ".")
    if "\0" in str(root):
        raise InputError(f"{root!r}: not a usable folder name; give a new or existing folder.")
    try:
        if root.exists() and not root.is_dir():
            raise ConfigError(f"{root} exists and is not a folder; give a new or existing folder.")
        written = scaffold(root)
    except OSError as exc:  # the OS refuses to look at the path (a name too long, a loop, ...)
        raise InputError(
            f"{str(root)[:300]}: cannot use it ({exc.strerror or exc}); give a new or existing folder."
        ) from None
    if as_json:
        print(json.dumps({"project": str(root), "created": [str(p) for p in written]}, indent=2, sort_keys=True))
        return 0
    for path in written:
        print(f"created {path}")
    where = "" if not argv else f"cd {root} && "
    print(f"Next: {where}rbln-build          (build the matrix in conf/matrix/main.yaml)")
    print("      rbln-build status   (what a build would redo; exit 1 when anything would)")
    return 0
