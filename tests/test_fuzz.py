"""Fuzz (hypothesis) of the two ways input reaches rbln-build: the CLI's configuration path and the
JSON-lines estimator.

* CLI: ``rbln_build.commands._build.main`` in process with generated Hydra overrides (names with
  separators and unicode, huge and negative numbers, budget strings, nested lists, build dirs,
  expect_failure and include entries). The build itself is replaced by the matrix expansion (every
  config and recipe check runs; nothing is compiled), so an example takes about half a second. For
  every example: exit 0 or 2, no traceback, a configuration error is exactly one line, and nothing
  at all was created (the build stops before writing, and a configuration error writes nothing).
  A few hostile cases also run through the real CLI as a subprocess, build included.
* Estimator: ``rbln_build.estimator._jsonl.run`` with generated lines (valid requests with fields
  replaced by arbitrary JSON, raw text, deep nesting, huge numbers): exactly one result per
  non-blank line, in order, each a JSON object with every result key.

More examples with ``-m slow`` (``RBLN_FUZZ_EXAMPLES`` sets how many).
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

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rbln_build import cli
from rbln_build.estimator._jsonl import run as estimate_lines

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


def _expand_only(jobs: list[Any], sweep: Any, state: dict[str, Any]) -> int:
    """The build replaced by what precedes its first write: every job expanded into cells."""
    from rbln_build.config import expand_all

    expand_all(jobs)
    return 0


def run_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, list[str]]:
    """(exit code, stderr, what was created in a fresh working directory) of one in-process CLI run."""
    with tempfile.TemporaryDirectory() as work, monkeypatch.context() as mp:
        mp.chdir(work)
        mp.setattr(cli, "_build", _expand_only)
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
