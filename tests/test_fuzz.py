"""Fuzz (hypothesis) of the two ways input reaches rbln-build: the CLI's configuration path and the
JSON-lines estimator.

* CLI: ``rbln_build.cli.main`` (the build command, rbln_build.commands._build) in process with generated Hydra overrides (names with
  separators and unicode, huge and negative numbers, budget strings, nested lists, build dirs,
  expect_failure and include entries). The build itself is replaced by the matrix expansion (every
  config and recipe check runs; nothing is compiled), so an example takes about half a second. For
  every example: exit 0 or 2, no traceback, a configuration error is exactly one line, and nothing
  at all was created (the build stops before writing, and a configuration error writes nothing).
  A few hostile cases also run through the real CLI as a subprocess, build included.
* Estimator: ``rbln_build.inspection._jsonl.run`` with generated lines (valid requests with fields
  replaced by arbitrary JSON, raw text, deep nesting, huge numbers): exactly one result per
  non-blank line, in order, each a JSON object with every result key.

* Every subcommand (``diff``, ``init``, ``report``, ``status``, ``gc``, ``recipe add``, ``run
  --manifest``, ``explain``, ``plan``, ``serve-command``, ``release``, ``verify``) in process, in a
  generated hostile working directory (documents from deep nesting to wrong-typed manifests, serving
  records and release.json files, binary garbage and YAML alias bombs; a symlink loop, a file where
  a folder belongs, a FIFO, ``/dev/zero``, over-long names) with generated paths, names, flags and
  numbers (``run`` both ways: ``--manifest`` and a cell folder): never exit 3 or a traceback, an input error is one line, nothing changes outside the
  place the command writes to (init's folder, report's ``report/``, recipe add's ``--to``,
  explain's ``--plot`` file, release's ``--to`` and its build directory's lock), a victim folder
  beside the world survives, and the process stays under a resident-memory limit (this process's
  size at import plus 1 GiB; the JSON-lines stream and the build's config path are held to it too).
  The ``build`` command itself is the first item above (its config path, in process).

More examples with ``-m slow`` (``RBLN_FUZZ_EXAMPLES`` sets how many; 400 by default, so each of the
two slow generated tests feeds at least 300 hostile inputs).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rbln_build import cli
from rbln_build.commands import _build as build_command
from rbln_build.inspection._jsonl import run as estimate_lines

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MANY = settings(
    max_examples=int(os.environ.get("RBLN_FUZZ_EXAMPLES", "400")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# -- generated Hydra overrides ----------------------------------------------------------------------

KNOWN_MODELS = ["qwen3_8b", "llama3_2_1b"]
KNOWN_DEVICES = ["rebel100", "atom_max_x4"]
HOSTILE_NAMES = [
    "..",
    "../x",
    "../../../victim/llama",
    "/etc",
    ".hidden",
    "a..b",
    "a.",
    "-x",
    "x" * 300,
    "١٠",
    "a/b",
    "a\\b",
    "",
    " ",
    "ok name",
]

names = st.one_of(
    st.sampled_from(KNOWN_MODELS + KNOWN_DEVICES),
    st.sampled_from(HOSTILE_NAMES),
    st.text(alphabet="ab._-/١ ", max_size=10),
)
numbers = st.one_of(st.integers(-3, 3), st.integers(-(10**40), 10**40), st.sampled_from([2**21 + 1, 4097, 65, 10**9]))
budget_values = st.one_of(
    st.sampled_from(["0.3", "null", "1", "1.0", "'10GB'", "'50%'", "'١٠GB'", "'0%'", "nan", "inf", "-1", "true"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.integers(1, 120).map(lambda n: "'" + "9" * n + "GB'"),
    st.text(alphabet="0123456789.%GBKbk ", max_size=12).map(lambda t: repr(t)),
)


def _list(items: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(items, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]")


def _nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


overrides = st.one_of(
    names.map(lambda n: f"model={n}"),
    names.map(lambda n: f"device={n}"),
    names.map(lambda n: f"matrix={n}"),
    budget_values.map(lambda b: f"budget={b}"),
    _list(names).map(lambda v: f"matrix.models={v}"),
    _list(names).map(lambda v: f"matrix.devices={v}"),
    _list(budget_values).map(lambda v: f"matrix.budgets={v}"),
    _list(numbers.map(str)).map(lambda v: f"matrix.batch_sizes={v}"),
    _list(numbers.map(str)).map(lambda v: f"matrix.max_seq_lens={v}"),
    _list(numbers.map(str)).map(lambda v: f"matrix.kvcache_num_blocks={v}"),
    numbers.map(lambda n: f"matrix.kvcache_partition_len={n}"),
    numbers.map(lambda n: f"device.num_devices={n}"),
    st.sampled_from(["eager", "flash_attn", "x", "null", "1"]).map(lambda v: f"matrix.attn_impl={v}"),
    st.one_of(names, st.sampled_from(["''", "/proc/x", "/dev/null/x", "/sys/x", "sub/dir"])).map(
        lambda v: f"build_dir={v}"
    ),
    st.tuples(names, names).map(lambda t: f"matrix.expect_failure=[{{cell:{t[0]},kind:{t[1]}}}]"),
    names.map(lambda n: f"matrix.expect_failure=[{{cell:{n}}}]"),
    st.tuples(_list(names), _list(budget_values)).map(lambda t: f"matrix.include=[{{models:{t[0]},budgets:{t[1]}}}]"),
    st.integers(1, 60).map(lambda d: f"matrix.budgets={_nested(d)}"),
    st.text(max_size=20),  # anything at all
)
argvs = st.tuples(st.booleans(), st.lists(overrides, min_size=1, max_size=4)).map(
    lambda t: (["-m"] if t[0] else []) + ["matrix=plans", *t[1]]
)


def _expand_only(
    jobs: list[Any], sweep: Any, state: dict[str, Any], full_table: bool = False, outputs: Any = None
) -> int:
    """The build replaced by what precedes its first write: every job expanded into cells."""
    from rbln_build.colocation import expand_all

    expand_all(jobs)
    return 0


def run_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, list[str]]:
    """(exit code, stderr, what was created in a fresh working directory) of one in-process CLI run."""
    with tempfile.TemporaryDirectory() as work, monkeypatch.context() as mp:
        mp.chdir(work)
        mp.setattr(build_command, "_build", _expand_only)
        mp.setattr(sys, "argv", ["rbln-build", *argv])
        err, out = io.StringIO(), io.StringIO()
        code: Any = 0
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                cli.main()
            except SystemExit as exc:
                code = exc.code
        created = sorted(str(p.relative_to(work)) for p in Path(work).rglob("*"))
    return int(code or 0), err.getvalue(), created


def check_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, err, created = run_cli(argv, monkeypatch)
    assert code in (0, 2), (argv, code, err)
    assert "Traceback" not in err, (argv, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rbln-build: "), (argv, err)
    assert created == [], (argv, created)
    assert_bounded_memory(f"rbln-build {argv}")


@FAST
@given(argv=argvs)
def test_cli_config_path(argv: list[str]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        check_cli(argv, mp)


@pytest.mark.slow
@MANY
@given(argv=argvs)
def test_cli_config_path_many(argv: list[str]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        check_cli(argv, mp)


@pytest.mark.parametrize(
    "override",
    [
        pytest.param("matrix.models=[../../../victim/llama]", id="traversal"),
        pytest.param("device.num_devices=1000000000", id="huge-count"),
        pytest.param("budget='" + "1" * 5000 + "GB'", id="5000-digit-budget"),
        pytest.param("budget=" + "1" * 5000, id="5000-digit-int-budget"),
    ],
)
def test_real_cli_hostile_overrides(tmp_path: Path, override: str) -> None:
    """The real CLI as a subprocess (build included): exit 2, one line, nothing anywhere."""
    work = tmp_path / "work"
    work.mkdir()
    extra = ["device=rebel100"] if override.startswith("device.") else []
    proc = subprocess.run(
        [sys.executable, "-m", "rbln_build.cli", "matrix=plans", *extra, override],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert list(tmp_path.rglob("*")) == [work]


# -- generated JSON lines ---------------------------------------------------------------------------

TEMPLATE = {
    "npu": "RBLN-CA25",
    "batch_size": 8,
    "max_seq_len": 40960,
    "attn_impl": "flash_attn",
    "kvcache_partition_len": 8192,
    "memory_budget": 0.65,
    "alloc": {"prefill": {"weights": [[10737418240]]}},
    "kv_tensors": {"k0": {"can_resize": True, "sizes": [[3145728]]}, "v0": {"can_resize": True, "sizes": [[3145728]]}},
}
RESULT_KEYS = {
    "ok",
    "kvcache_num_blocks",
    "num_full_blocks",
    "num_min_blocks",
    "attention",
    "breakdown",
    "warnings",
    "error",
    "error_kind",
    "line",
    "id",
}

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**30), 10**30),
        st.floats(allow_nan=False),
        st.text(max_size=8),
        st.sampled_from(["١٠GB", "9" * 5000, "50%", "10GB", "RBLN-CR03"]),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=12,
)
mutated = st.tuples(
    st.sampled_from([*TEMPLATE, "id", "current_blocks", "num_devices", "kvcache_num_blocks", "extra"]), json_values
).map(lambda kv: json.dumps({**TEMPLATE, kv[0]: kv[1]}))
raw_lines = st.one_of(
    mutated,
    st.text(max_size=40).filter(lambda t: "\n" not in t and "\r" not in t),
    st.integers(1, 200000).map(lambda d: "[" * d),
    st.integers(1, 3000).map(lambda d: "[" * d + "]" * d),
    st.integers(4300, 6000).map(lambda n: '{"npu": "RBLN-CA25", "max_seq_len": ' + "9" * n + "}"),
    json_values.map(json.dumps),
)


def check_jsonl(lines: list[str]) -> None:
    results = [json.loads(out) for out in estimate_lines(lines)]
    expected = [i for i, text in enumerate(lines, start=1) if text.strip()]
    assert [r["line"] for r in results] == expected
    for r in results:
        assert set(r) == RESULT_KEYS
        assert r["ok"] is (r["error"] is None)


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(raw_lines, min_size=1, max_size=5))
def test_jsonl_answers_every_line(lines: list[str]) -> None:
    check_jsonl(lines)


@pytest.mark.slow
@MANY
@given(lines=st.lists(raw_lines, min_size=1, max_size=8))
def test_jsonl_answers_every_line_many(lines: list[str]) -> None:
    check_jsonl(lines)


def check_jsonl_memory(lines: list[str]) -> None:
    check_jsonl(lines)
    assert_bounded_memory(f"{len(lines)} JSON lines")


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(raw_lines, min_size=1, max_size=5))
def test_jsonl_bounded_memory(lines: list[str]) -> None:
    check_jsonl_memory([*lines, json.dumps({**TEMPLATE, "num_devices": 10**9})])


# -- every subcommand, on generated hostile paths, documents, numbers and names ----------------------

RSS_LIMIT = psutil.Process().memory_info().rss + (1 << 30)  # this process, plus 1 GiB: far above any honest input


def assert_bounded_memory(what: str) -> None:
    rss = psutil.Process().memory_info().rss
    assert rss < RSS_LIMIT, f"{what}: resident memory {rss:,} bytes, over the limit of {RSS_LIMIT:,}"


manifest_entries = st.fixed_dictionaries(
    {},
    optional={
        "cell": names,
        "status": st.sampled_from(["ok", "failed", 1, None]),
        "inputs": st.one_of(
            json_values, st.fixed_dictionaries({}, optional={"toolchain": json_values, "npu": json_values})
        ),
        "compile_key": st.one_of(st.sampled_from(["../../../victim", "a" * 64, "", None]), json_values),
        "kvcache_num_blocks": st.one_of(numbers, json_values),
        "artifact": st.one_of(
            json_values, st.fixed_dictionaries({"path": st.sampled_from(["../victim", "loop1", "afile", "/etc"])})
        ),
    },
)
serving_records = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "model": st.one_of(st.sampled_from(["Qwen/Qwen3-0.6B", "artifacts/c", None]), json_values),
            "flags": st.one_of(
                json_values,
                st.dictionaries(
                    st.sampled_from(["max_num_seqs", "rbln_num_devices_per_local_rank", "dtype", "x"]),
                    st.one_of(numbers, json_values),
                    max_size=3,
                ),
            ),
            "notes": st.one_of(st.just([]), json_values),
            "exact": st.one_of(st.booleans(), json_values),
            "precompiled": st.one_of(st.booleans(), json_values),
            "kvcache_num_blocks": st.one_of(numbers, json_values),
        },
        optional={"refused": st.one_of(st.none(), st.text(max_size=5)), "tokenizer": json_values},
    ),
)
cell_records = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(["ok", "failed", "expected_failure", 1, None]),
        "serving": serving_records,
        "artifact": st.one_of(json_values, st.fixed_dictionaries({"content_hash": st.sampled_from(["ab", "a" * 64])})),
    },
)
documents = st.one_of(
    json_values.map(json.dumps),
    st.fixed_dictionaries(  # a manifest with serving records and deployments (serve-command, release)
        {
            "cells": st.one_of(
                json_values, st.dictionaries(st.sampled_from(["c", "x", "../c"]), cell_records, max_size=2)
            )
        },
        optional={
            "deployments": st.one_of(
                json_values,
                st.fixed_dictionaries(
                    {"tiny_pair": st.one_of(json_values, st.just({"models": {"tiny_llama": {"cell": "c"}}}))}
                ),
            )
        },
    ).map(json.dumps),
    st.fixed_dictionaries(  # a release.json
        {
            "format": st.sampled_from(["rbln-build-release/1", "x", None]),
            "cells": st.one_of(json_values, st.just({"c": {"dir": "c", "record": {"serving": {"model": "m"}}}})),
            "files": st.one_of(
                json_values,
                st.dictionaries(
                    st.sampled_from(["c/rbln-build.json", "../x", "c/../../x", "/etc/passwd", "c"]),
                    json_values,
                    max_size=2,
                ),
            ),
        },
        optional={"content_sha256": st.sampled_from(["", "a" * 64])},
    ).map(json.dumps),
    st.fixed_dictionaries(
        {"cells": st.one_of(json_values, st.dictionaries(names, st.one_of(manifest_entries, json_values), max_size=3))},
        optional={"schema_version": json_values},
    ).map(json.dumps),
    st.integers(1, 100_000).map(lambda d: "[" * d + "]" * d),
    st.integers(4300, 6000).map(lambda n: '{"cells": ' + "9" * n + "}"),
    st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
    st.sampled_from(
        [
            "",
            "a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n",
            "x: &x [1, *x]",
            "{}",
            '{"cells": {}}',
        ]
    ),
)
PATHS = [
    "doc",
    "doc2",
    "loop1",
    "afile/x",
    "afile",
    "folder",
    "fifo",
    "/dev/zero",
    "/proc/self/x",
    "x" * 300,
    "missing/y",
    "../sibling",
    "",
    "a\nb",
    "bld",
    "bld/artifacts/c",
    "rel",
    "rel/c",
]
paths = st.one_of(st.sampled_from(PATHS), names)
flags = st.sampled_from(
    ["--json", "--dry-run", "--open", "-h", "--keep", "--keep=doc", "--to", "--max-seq-len", "--", "-m"]
)
explain_args = st.one_of(
    st.tuples(
        st.one_of(st.sampled_from(["tiny_qwen3", "qwen3_8b"]), names),
        st.one_of(st.sampled_from(["rebel100", "atom_max"]), names),
        st.lists(
            st.one_of(
                st.tuples(
                    st.sampled_from(["batch_size", "max_seq_len", "kvcache_partition_len", "prefill_chunk_size"]),
                    numbers,
                ).map(lambda t: f"{t[0]}={t[1]}"),
                st.sampled_from(["attn_impl=eager", "attn_impl=x", "--json", "--plot", "x=1", "model=tiny_llama"]),
                _list(budget_values).map(lambda b: "budgets=" + b.strip("[]")),
                paths.map(lambda p: f"--plot={p}.png"),
            ),
            max_size=3,
        ),
    ).map(lambda t: [f"model={t[0]}", f"device={t[1]}", *t[2]]),
    names.map(lambda n: [f"deployment={n}"]),
)
deployment_args = st.tuples(
    st.one_of(st.just("tiny_pair"), names),
    st.lists(
        st.one_of(
            numbers.map(lambda n: f"deployment.models.0.batch_size={n}"),
            numbers.map(lambda n: f"deployment.reservations.0.bytes={n}"),
            numbers.map(lambda n: f"deployment.serve.port={n}"),
            names.map(lambda n: f"deployment.device={n}"),
            paths.map(lambda p: f"build_dir={p}"),
            st.just("--json"),
        ),
        max_size=3,
    ),
).map(lambda t: [f"deployment={t[0]}", *t[1]])
serve_flags = st.one_of(
    numbers.map(lambda n: ["--port", str(n)]),
    st.sampled_from(["0,1", "0", "a", "-1", "", "0," * 40]).map(lambda d: ["--devices", d]),
    st.just(["--json"]),
)
release_flags = st.one_of(
    st.just(["--build-dir", "bld"]),  # the world's build dir: its manifest is a generated document
    paths.map(lambda p: ["--build-dir", p]),
    paths.map(lambda p: ["--to", p]),
    names.map(lambda n: ["--cells", n]),
    st.sampled_from(["*", "[", "c"]).map(lambda g: ["--cells", g]),
    names.map(lambda n: ["--deployment", n]),
    paths.map(lambda p: ["--sign", p]),
    st.sampled_from([["--allow-failed"], ["--json"]]),
)
subcommands = st.one_of(
    st.tuples(st.just("diff"), st.lists(st.one_of(paths, flags), max_size=3)),
    st.tuples(st.just("init"), st.lists(paths, max_size=2)),
    st.tuples(st.just("report"), st.lists(st.one_of(paths.map(lambda p: f"build_dir={p}"), flags), max_size=2)),
    st.tuples(st.just("status"), st.lists(paths.map(lambda p: f"build_dir={p}"), min_size=1, max_size=1)),
    st.tuples(
        st.just("gc"),
        st.lists(
            st.one_of(paths.map(lambda p: f"build_dir={p}"), st.just("--dry-run"), paths.map(lambda p: f"--keep={p}")),
            min_size=1,
            max_size=3,
        ),
    ),
    st.tuples(
        st.just("recipe"),
        st.tuples(names, paths, paths, numbers, numbers).map(
            lambda t: ["add", t[0], "--from", t[1], "--to", t[2], "--max-seq-len", str(t[3]), "--batch-size", str(t[4])]
        ),
    ),
    st.tuples(st.just("run"), st.tuples(paths, names).map(lambda t: ["--manifest", t[0], t[1], "--prompt-ids", "1"])),
    st.tuples(  # run CELL: a built cell, a released one (release.json beside it), anything else
        st.just("run"),
        st.tuples(
            st.one_of(st.sampled_from(["bld/artifacts/c", "rel/c"]), paths), st.sampled_from(["1", "1,2", ""])
        ).map(lambda t: [t[0], "--prompt-ids", t[1]]),
    ),
    st.tuples(st.just("explain"), explain_args),
    st.tuples(st.just("plan"), deployment_args),
    st.tuples(
        st.just("serve-command"),
        st.one_of(
            deployment_args,
            st.tuples(
                st.one_of(st.sampled_from(["bld/artifacts/c", "rel/c"]), paths), st.lists(serve_flags, max_size=2)
            ).map(lambda t: [t[0], *[a for f in t[1] for a in f]]),
        ),
    ),
    st.tuples(
        st.just("release"),
        st.one_of(
            st.lists(release_flags, max_size=2).map(
                lambda fs: ["v1", "--build-dir", "bld", *[a for f in fs for a in f]]
            ),
            st.tuples(st.one_of(st.sampled_from(["v1", "r.1"]), names), st.lists(release_flags, max_size=3)).map(
                lambda t: [t[0], *[a for f in t[1] for a in f]]
            ),
        ),
    ),
    st.tuples(
        st.just("verify"),
        st.tuples(
            st.one_of(st.sampled_from(["rel", "file://rel", "file:///nonexistent"]), paths),
            st.lists(st.one_of(paths.map(lambda p: ["--key", p]), st.just(["--json"])), max_size=2),
        ).map(lambda t: [t[0], *[a for f in t[1] for a in f]]),
    ),
)
# exit statuses a subcommand may give; 3 (a bug) never
ALLOWED = {
    "diff": {0, 1, 2},
    "init": {0, 2},
    "report": {0, 2},
    "status": {0, 1, 2},
    "gc": {0, 1, 2},
    "recipe": {0, 2},
    "run": {2},
    "explain": {0, 1, 2},
    "plan": {0, 1, 2},
    "serve-command": {0, 1, 2},
    "release": {0, 1, 2},
    "verify": {0, 1, 2},
}


def _world(root: Path, doc: str, doc2: str) -> Path:
    """A hostile working directory: two documents, a symlink loop, a file where a folder belongs, a
    folder, a FIFO; and a victim folder beside it that no argument names."""
    work = root / "work"
    work.mkdir()
    (work / "doc").write_text(doc, encoding="utf-8", errors="surrogatepass")
    (work / "doc2").write_text(doc2, encoding="utf-8", errors="surrogatepass")
    (work / "afile").write_text("x")
    (work / "folder").mkdir()
    (work / "folder" / "manifest.json").write_text(doc, encoding="utf-8", errors="surrogatepass")
    os.mkfifo(work / "fifo")
    os.symlink("loop2", work / "loop1")
    os.symlink("loop1", work / "loop2")
    (work / "bld" / "artifacts" / "c").mkdir(parents=True)  # a build dir: its manifest, one cell
    (work / "bld" / "manifest.json").write_text(doc2, encoding="utf-8", errors="surrogatepass")
    (work / "bld" / "artifacts" / "c" / "rbln-build.json").write_text("{}")
    (work / "rel" / "c").mkdir(parents=True)  # a release: release.json, a signature, one cell
    (work / "rel" / "release.json").write_text(doc, encoding="utf-8", errors="surrogatepass")
    (work / "rel" / "release.json.sig").write_text(doc2, encoding="utf-8", errors="surrogatepass")
    (work / "rel" / "c" / "rbln-build.json").write_text("{}")
    (root / "victim").mkdir()
    (root / "victim" / "data.txt").write_text("keep me")
    return work


def _listing(root: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink() or not p.is_file() or p.is_fifo():
            out[str(p.relative_to(root))] = b"<link, fifo or folder>" if p.is_symlink() or p.is_fifo() else b""
        elif p.is_file():
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def _targets(command: str, args: list[str]) -> list[str]:
    """The places ``command ARGS`` may write (relative to work/): init's folder, report's build_dir,
    recipe add's --to folder (and the project's conf/model, which has none here)."""
    if command == "init":
        return [a for a in args if not a.startswith("-")][:1] or ["."]
    if command == "report":
        return [a.split("=", 1)[1] + "/report" for a in args if a.startswith("build_dir=")] or ["build/report"]
    if command == "gc":  # it holds the build directory's lock while it removes
        return [a.split("=", 1)[1] for a in args if a.startswith("build_dir=")][-1:] or ["build"]
    if command == "recipe" and "--to" in args:
        return [args[args.index("--to") + 1]]
    if command == "explain":  # --plot FILE (written through a temporary sibling, renamed)
        return [a.split("=", 1)[1] for a in args if a.startswith("--plot=")]
    if command == "release":  # --to (default <build dir>/releases), and the build dir's lock
        build = _flag(args, "--build-dir") or "build"
        return [_flag(args, "--to") or f"{build}/releases", build]
    return []


def _flag(args: list[str], flag: str) -> str | None:
    """The value of the last ``FLAG VALUE`` in ``args`` (argparse takes the last)."""
    values = [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]
    return values[-1] if values else None


def _inside_the_world(target: str) -> bool:
    """A place a command may write (``_targets``), named from work/, lies inside the temporary root:
    a name that climbs out of it ("../../../victim/llama" is /victim/llama from /tmp/<tmp>/work, and
    "/etc" is /etc) would have ``init``, ``report`` or ``release`` write there, which no check here
    sees (it lists the root only) and which a test run must never do."""
    if os.path.isabs(target):
        return False
    where = os.path.normpath(os.path.join("work", target))
    return where != ".." and not where.startswith("../")


def check_subcommand(command: str, args: list[str]) -> None:
    assume(all(_inside_the_world(t) for t in _targets(command, args)))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        work = _world(root, *DOCS)
        before = _listing(root)
        code, err = _run_in(work, [command, *args])
        after = _listing(root)
        assert_bounded_memory(f"{command} {args}")
    assert code in ALLOWED[command], (command, args, code, err)
    assert "Traceback" not in err, (command, args, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1, (command, args, err)
    places = [os.path.normpath(os.path.join("work", t)) for t in _targets(command, args)]
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    # inside a place, or a folder on the way to one (init DIR and recipe add --to make their parents);
    # a place that is the whole tree ("init .." from work/) holds everything
    stray = [
        k
        for k in changed
        if not any(p == "." or k == p or k.startswith(p.rstrip("/") + "/") or p.startswith(k + "/") for p in places)
    ]
    assert stray == [], (command, args, stray)
    assert after.get("victim/data.txt") == b"keep me"


DOCS = ("{}", "{}")


_INVENTORY: list[str] = []


def _inventory_cache() -> str:
    """One inventory cache for every example (the memory model's inventories take seconds to make),
    removed when the tests end."""
    if not _INVENTORY:
        import atexit
        import shutil

        _INVENTORY.append(tempfile.mkdtemp(prefix="rbln-fuzz-inventory-"))
        atexit.register(shutil.rmtree, _INVENTORY[0], True)
    return _INVENTORY[0]


def _run_in(work: Path, argv: list[str]) -> tuple[int, str]:
    err, out = io.StringIO(), io.StringIO()
    code: Any = 0
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        mp.setenv("RBLN_BUILD_CACHE", _inventory_cache())  # outside the world: explain and plan fill it
        if argv[0] == "run":
            from rbln_build.run import main as run_main

            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                try:
                    code = run_main(argv[1:]) if argv[1:] else 2
                except SystemExit as exc:  # argparse's usage errors
                    code = exc.code
        else:
            mp.setattr(sys, "argv", ["rbln-build", *argv])
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                try:
                    cli.main()
                except SystemExit as exc:
                    code = exc.code
    return int(code or 0), err.getvalue()


def _check_generated(command: tuple[str, list[str]], doc: str, doc2: str) -> None:
    global DOCS
    DOCS = (doc, doc2)
    check_subcommand(command[0], command[1])


@FAST
@given(command=subcommands, doc=documents, doc2=documents)
def test_every_subcommand_on_hostile_input(command: tuple[str, list[str]], doc: str, doc2: str) -> None:
    _check_generated(command, doc, doc2)


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("RBLN_FUZZ_EXAMPLES", "400")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(command=subcommands, doc=documents, doc2=documents)
def test_every_subcommand_on_hostile_input_many(command: tuple[str, list[str]], doc: str, doc2: str) -> None:
    _check_generated(command, doc, doc2)


def test_no_example_writes_outside_its_temporary_world() -> None:
    """The examples whose command would write to a place outside the world (``init /etc``, or
    ``init ../../../victim/llama`` from /tmp/<tmp>/work: /victim/llama) are never run; they did run,
    and left projects in / and /etc on the machine that ran the suite."""
    for outside in ("/etc", "../../../victim/llama", "../..", "../x/../../y", "/", "bld/../../.."):
        assert not _inside_the_world(outside), outside
    for inside in ("doc", "..", "../victim/llama", "../x", "", ".", "bld/artifacts/c", "a\nb", "loop1/.."):
        assert _inside_the_world(inside), inside
    assert not any(_inside_the_world(t) for t in _targets("init", ["/etc"]))
    assert not any(_inside_the_world(t) for t in _targets("report", ["build_dir=../../../b"]))
