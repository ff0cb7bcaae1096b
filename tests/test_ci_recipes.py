"""The CI recipes users copy (docs/ci/github-actions.yml, docs/ci/gitlab-ci.yml) run green, step by
step, on this machine: each file is parsed as YAML, its jobs are taken in order (``needs``; GitLab's
stages), each job's matrix (``strategy.matrix``; ``parallel: N``) is expanded, and every ``run`` /
``script`` runs in a fresh shell (``bash -eo pipefail``, as both platforms do) in a fresh folder,
with the variables each platform sets (``GITHUB_*``, ``CI_NODE_INDEX``, ...), the file's own ones,
and moto's S3 server on 127.0.0.1 standing in for the bucket.

Two pipelines per file, as a project lives them: a tag ``v1`` (4 shards, the merge, the signed
release verified where it is published) with ``matrix.batch_sizes=[8]``, then a pull/merge request
that changes it to ``[4]`` (the review against v1: 7 cells changed by the options change, one
added). Checked: every JUnit file validates against tests/junit.xsd; the merge compiled nothing;
the step summary and the review render as Markdown (markdown-it-py) with one table row per cell.

Not run, by necessity: ``uses:`` actions (checkout: the job's folder is the project; upload-artifact:
nothing here reads them, the S3 cache carries the work) and the install step (``id: install``,
GitLab's ``before_script``): this test's venv is that install, from constraints.txt, and a test
never downloads. A ``${{ }}`` expression or an ``if:``/``rules:`` condition this runner does not
know fails the test: a recipe that changes must change here too.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_remote import s3  # noqa: F401  (the fixture: moto's S3 server on 127.0.0.1)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent
XSD = Path(__file__).resolve().parent / "junit.xsd"
MATRIX = "matrix=plans matrix.batch_sizes=[{b}] matrix.expect_failure=[{{cell:qwen3_8b.atom_max_x4.bs{b}.b0.3,kind:insufficient_memory}}]"


def shell(script: str, cwd: Path, env: dict[str, str]) -> None:
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{cwd.name}: exit {proc.returncode}\n{script}\n--\n{proc.stdout}\n{proc.stderr}"


def base_env(s3env: dict[str, str], tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CI", "GITLAB_"))}
    env.update(s3env, HF_HUB_OFFLINE="1", CI="true", HOME=str(tmp / "home"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # rbln-build, python: this venv
    return env


def keys(tmp: Path) -> tuple[str, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private.decode().strip(), public.decode().strip()


def check_junit(path: Path) -> int:
    import xmlschema
    from junitparser import JUnitXml

    xmlschema.XMLSchema(str(XSD)).validate(str(path))
    return sum(suite.tests for suite in JUnitXml.fromfile(str(path)))


def rendered(markdown: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").render(markdown)


# -- GitHub Actions ------------------------------------------------------------------------------


def github_expr(expr: str, ctx: dict[str, str]) -> str:
    expr = expr.strip()
    if expr not in ctx:
        raise AssertionError(f"github-actions.yml: ${{{{ {expr} }}}} is not known to this test; teach it")
    return ctx[expr]


def github_sub(text: str, ctx: dict[str, str]) -> str:
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: github_expr(m.group(1), ctx), str(text))


def github_if(cond: str | None, ctx: dict[str, str]) -> bool:
    if cond is None or cond == "always()":
        return True
    known = {
        "github.event_name == 'pull_request'": ctx["github.event_name"] == "pull_request",
        "startsWith(github.ref, 'refs/tags/')": ctx["github.ref"].startswith("refs/tags/"),
    }
    if cond not in known:
        raise AssertionError(f"github-actions.yml: if: {cond} is not known to this test; teach it")
    return known[cond]


def run_github(
    flow: dict[str, Any], tmp: Path, env0: dict[str, str], ctx: dict[str, str], name: str
) -> dict[str, Path]:
    """Every job of ``flow`` for one event; returns each job folder (job name + matrix index)."""
    jobs, order = flow["jobs"], []
    while len(order) < len(jobs):  # in the order ``needs`` gives
        for job, spec in jobs.items():
            needs = spec.get("needs", [])
            needs = [needs] if isinstance(needs, str) else needs
            if job not in order and all(n in order for n in needs):
                order.append(job)
    folders = {}
    for job in order:
        spec = jobs[job]
        if not github_if(spec.get("if"), ctx):
            continue
        axes = spec.get("strategy", {}).get("matrix", {})
        for values in itertools.product(*axes.values()) if axes else [()]:
            jctx = dict(ctx, **{f"matrix.{k}": str(v) for k, v in zip(axes, values, strict=True)})
            folder = tmp / f"{name}-{job}{''.join(f'-{v}' for v in values)}"
            folder.mkdir(parents=True)
            summary = folder.parent / f"{folder.name}.step-summary.md"
            env = dict(env0, GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(summary), GITHUB_WORKSPACE=str(folder))
            env.update(GITHUB_EVENT_NAME=ctx["github.event_name"], GITHUB_REF=ctx["github.ref"])
            env.update(GITHUB_REF_NAME=ctx["github.ref_name"])
            env.update({k: github_sub(v, jctx) for k, v in {**flow.get("env", {}), **spec.get("env", {})}.items()})
            env.update(ctx["overrides"] and dict(x.split("=", 1) for x in ctx["overrides"].split("\n")) or {})
            for step in spec["steps"]:
                if "uses" in step or step.get("id") == "install" or not github_if(step.get("if"), jctx):
                    continue
                senv = dict(env, **{k: github_sub(v, jctx) for k, v in step.get("env", {}).items()})
                shell(github_sub(step["run"], jctx), folder, senv)
            folders[folder.name] = folder
    return folders


def test_the_github_actions_workflow_runs_green_step_by_step(tmp_path: Path, s3: Any) -> None:  # noqa: F811
    s3env = s3[0]
    flow = yaml.safe_load((ROOT / "docs" / "ci" / "github-actions.yml").read_text())
    private, public = keys(tmp_path)
    prefix = "s3://rbln-cache/ci-github"
    common = {
        "secrets.RBLN_CACHE_KEY": s3env["AWS_ACCESS_KEY_ID"],
        "secrets.RBLN_CACHE_SECRET": s3env["AWS_SECRET_ACCESS_KEY"],
        "secrets.RBLN_RELEASE_KEY": private,
        "vars.RBLN_RELEASE_PUB": public,
    }
    env0 = base_env(s3env, tmp_path)
    tag = dict(common, **{"github.event_name": "push", "github.ref": "refs/tags/v1", "github.ref_name": "v1"})
    tag["overrides"] = f"RBLN_MATRIX={MATRIX.format(b=8)}\nRBLN_CACHE={prefix}/cache\nRBLN_RELEASES={prefix}/releases"
    done = run_github(flow, tmp_path, env0, tag, "tag")
    assert sorted(done) == ["tag-merge", "tag-release", "tag-shard-1", "tag-shard-2", "tag-shard-3", "tag-shard-4"]
    assert sum(check_junit(done[f"tag-shard-{i}"] / f"junit-shard-{i}.xml") for i in range(1, 5)) == 8
    assert check_junit(done["tag-merge"] / "junit.xml") == 8
    html = rendered((tmp_path / "tag-merge.step-summary.md").read_text())
    assert html.startswith("<h3>rbln-build</h3>\n<table>") and "<p>No cell failed.</p>" in html, html
    # cells, compiled (the merge compiles nothing: every compile came from the shards through S3), ...
    assert re.findall(r"<td[^>]*>(.*?)</td>", html)[:2] == ["8", "0"], html
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    assert fs.cat(f"{prefix}/releases/LATEST") == b"v1\n"
    assert fs.exists(f"{prefix}/releases/v1/release.json.sig")

    pr = dict(
        common, **{"github.event_name": "pull_request", "github.ref": "refs/pull/7/merge", "github.ref_name": "7/merge"}
    )
    pr["overrides"] = tag["overrides"].replace(MATRIX.format(b=8), MATRIX.format(b=4))
    done = run_github(flow, tmp_path, env0, pr, "pr")
    assert sorted(done) == ["pr-merge", "pr-shard-1", "pr-shard-2", "pr-shard-3", "pr-shard-4"]  # no release
    html = rendered((tmp_path / "pr-merge.step-summary.md").read_text())
    assert "<h3>Against release v1</h3>" in html
    assert html.count("options changed: batch_size 8 -&gt; 4") == 7, html
    assert "1 added, 0 removed, 7 changed (7 by an options change)" in html


# -- GitLab CI -----------------------------------------------------------------------------------


def gitlab_rules(rules: list[dict[str, Any]] | None, env: dict[str, str]) -> bool:
    if rules is None:
        return True
    for rule in rules:
        cond = rule.get("if")
        known = {"$CI_COMMIT_TAG": bool(env.get("CI_COMMIT_TAG"))}
        if cond not in known:
            raise AssertionError(f"gitlab-ci.yml: rules: if: {cond} is not known to this test; teach it")
        if known[cond]:
            return rule.get("when", "on_success") != "never"
    return False


def run_gitlab(flow: dict[str, Any], tmp: Path, env0: dict[str, str], name: str) -> dict[str, Path]:
    folders = {}
    jobs = {k: v for k, v in flow.items() if isinstance(v, dict) and "script" in v}
    for stage in flow["stages"]:
        for job, spec in jobs.items():
            if spec.get("stage", "test") != stage:
                continue
            total = int(spec.get("parallel", 1))
            for index in range(1, total + 1):
                env = dict(env0, GITLAB_CI="true", CI_JOB_NAME=job, CI_JOB_STAGE=stage)
                env.update({k: str(v) for k, v in flow.get("variables", {}).items()})
                env.update({k: str(v) for k, v in spec.get("variables", {}).items()})
                env.update(dict(x.split("=", 1) for x in env0["__OVERRIDES"].split("\n")))
                if total > 1:
                    env.update(CI_NODE_INDEX=str(index), CI_NODE_TOTAL=str(total))
                if not gitlab_rules(spec.get("rules"), env):
                    continue
                folder = tmp / f"{name}-{job}{f'-{index}' if total > 1 else ''}"
                folder.mkdir(parents=True)
                env["CI_PROJECT_DIR"] = str(folder)
                env.pop("__OVERRIDES")
                shell("\n".join(spec["script"]), folder, env)  # before_script (the install) is this venv
                for report in spec.get("artifacts", {}).get("reports", {}).values():
                    assert (folder / report).is_file(), f"{job}: its report {report} was not written"
                folders[folder.name] = folder
    return folders


def test_the_gitlab_ci_file_runs_green_script_by_script(tmp_path: Path, s3: Any) -> None:  # noqa: F811
    s3env = s3[0]
    flow = yaml.safe_load((ROOT / "docs" / "ci" / "gitlab-ci.yml").read_text())
    private, public = keys(tmp_path)
    prefix = "s3://rbln-cache/ci-gitlab"
    env0 = base_env(s3env, tmp_path)
    env0.update(RELEASE_KEY=private, RELEASE_PUB=public)
    lines = f"RBLN_CACHE={prefix}/cache\nRBLN_RELEASES={prefix}/releases"
    tag = dict(
        env0, CI_PIPELINE_SOURCE="push", CI_COMMIT_TAG="v1", __OVERRIDES=f"RBLN_MATRIX={MATRIX.format(b=8)}\n{lines}"
    )
    done = run_gitlab(flow, tmp_path, tag, "tag")
    assert sorted(done) == ["tag-merge", "tag-release", "tag-shard-1", "tag-shard-2", "tag-shard-3", "tag-shard-4"]
    assert sum(check_junit(done[f"tag-shard-{i}"] / "junit-shard.xml") for i in range(1, 5)) == 8
    assert check_junit(done["tag-merge"] / "junit.xml") == 8
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    assert fs.cat(f"{prefix}/releases/LATEST") == b"v1\n"

    mr = dict(env0, CI_PIPELINE_SOURCE="merge_request_event", __OVERRIDES=f"RBLN_MATRIX={MATRIX.format(b=4)}\n{lines}")
    done = run_gitlab(flow, tmp_path, mr, "mr")
    assert "mr-release" not in done and "mr-merge" in done
    html = rendered((done["mr-merge"] / "review.md").read_text())
    assert html.count("<table>") == 1 and html.count("options changed: batch_size 8 -&gt; 4") == 7, html
