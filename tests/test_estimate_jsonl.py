"""The JSON-lines interface, in process and as the real ``python -m rbln_build.estimate`` subprocess."""

import io
import json
import subprocess
import sys

import pytest

from rbln_build.inspection._jsonl import EXAMPLE_IN, handle_line, main, run

MiB, GiB = 2**20, 2**30


def line(**overrides):
    base = {
        "npu": "RBLN-CA25",
        "batch_size": 8,
        "max_seq_len": 40960,
        "attn_impl": "flash_attn",
        "kvcache_partition_len": 8192,
        "alloc": {"prefill": {"weights": [[10 * GiB]], "DramTensor": [[99 * GiB]]}},
        "kv_tensors": {
            "k0": {"can_resize": True, "sizes": [[3 * MiB]]},
            "v0": {"can_resize": True, "sizes": [[3 * MiB]]},
        },
    }
    base.update(overrides)
    return json.dumps({k: v for k, v in base.items() if v is not ...})


def results(*lines):
    return [json.loads(text) for text in run(lines)]


@pytest.mark.parametrize(
    "overrides, blocks",
    [
        pytest.param({"memory_budget": 0.65}, 36, id="fraction"),
        pytest.param({"memory_budget": "65%"}, 36, id="percent"),
        pytest.param({"memory_budget": None}, 40, id="null-budget"),
        pytest.param({"memory_budget": 1.0}, 40, id="float-1.0-is-100%"),
        pytest.param({"memory_budget": "10288MB"}, None, id="below-floor"),
        pytest.param({"kvcache_num_blocks": 12}, 12, id="explicit"),
        pytest.param({"kvcache_num_blocks": None, "memory_budget": 0.65}, 36, id="null-count-is-auto"),
        # sizes measured at 36 blocks: the same answer
        pytest.param(
            {
                "memory_budget": 0.65,
                "current_blocks": 36,
                "kv_tensors": {
                    "k0": {"can_resize": True, "sizes": [[108 * MiB]]},
                    "v0": {"can_resize": True, "sizes": [[108 * MiB]]},
                },
            },
            36,
            id="re-estimation",
        ),
    ],
)
def test_results_match_the_estimator(overrides, blocks):
    (result,) = results(line(**overrides))
    assert result["kvcache_num_blocks"] == blocks
    assert (result["num_full_blocks"], result["num_min_blocks"]) == (40, 9)
    assert result["breakdown"]["non_kv_bytes"] == [[10 * GiB]]  # DramTensor excluded


def test_int_1_versus_float_1_0_survives_json():
    one_byte, everything = results(line(memory_budget=1), line(memory_budget=1.0))
    assert one_byte["error_kind"] == "insufficient_memory"
    assert "only 0 blocks can be allocated, but at least 9 blocks are required" in one_byte["error"]
    assert any("`1` is one byte" in w for w in one_byte["warnings"])
    assert everything["kvcache_num_blocks"] == 40


def test_spec_messages_through_json():
    over, excl, floor = results(
        line(memory_budget="100GB"),
        line(memory_budget=0.5, kvcache_num_blocks=20),
        line(memory_budget="10288MB"),
    )
    assert over["error"] == (
        "memory_budget (107374182400 bytes) exceeds the target NPU's available DRAM (16877879296 bytes)."
    )
    assert excl["error_kind"] == "budget_and_blocks_exclusive"
    assert floor["error"] == (
        "Insufficient memory for the required KV cache: only 8 blocks can be allocated, but at least 9 blocks are "
        "required. Consider reducing `max_seq_len` or `batch_size` (currently 8) to lower the memory requirement."
    )


@pytest.mark.parametrize(
    "text, fragment",
    [
        pytest.param("{bad", "Line 1 is not valid JSON", id="bad-json"),
        pytest.param("[1, 2]", "must be a JSON object, got list", id="not-an-object"),
        pytest.param(line(foo=1), "Unknown field(s) 'foo'", id="unknown-field"),
        pytest.param(line(npu=...), "Missing required field(s): npu", id="missing-npu"),
        pytest.param(line(alloc=...), "Missing required field(s): alloc", id="missing-alloc"),
        pytest.param(line(batch_size="8"), "`batch_size` must be a positive integer, got '8'", id="wrong-type"),
        pytest.param(line(alloc={"prefill": {"w": [[-1]]}}), "alloc.prefill.w[0][0]", id="negative-bytes"),
        pytest.param(line(kv_tensors={"k": {"sizes": [[1]]}}), "kv_tensors.k", id="kv-missing-can-resize"),
        pytest.param(line(current_blocks=0), "current_blocks: expected a positive integer", id="current-zero"),
        pytest.param(line(memory_budget=0.5).replace("0.5", "NaN"), "NaN is not valid JSON", id="nan-constant"),
    ],
)
def test_malformed_lines_are_invalid_request_results(text, fragment):
    (result,) = results(text)
    assert result["ok"] is False and result["error_kind"] == "invalid_request"
    assert fragment in result["error"]
    assert result["line"] == 1


def test_stream_goes_on_after_errors_and_skips_blank_lines():
    out = results(line(id="a"), "", "   ", "{bad", line(id=7, memory_budget="1TB"), line(id=[1], memory_budget=0.65))
    assert [r["line"] for r in out] == [1, 4, 5, 6]
    assert [r["id"] for r in out] == ["a", None, 7, [1]]
    assert [r["error_kind"] for r in out] == [None, "invalid_request", "budget_exceeds_dram", None]
    assert out[-1]["kvcache_num_blocks"] == 36


def test_invalid_utf8_is_a_line_error():
    result = handle_line(b"\xff\xfe{}", 3)
    assert result["error_kind"] == "invalid_request" and "Line 3 is not valid UTF-8" in result["error"]


def test_every_result_has_the_same_keys():
    keys = {frozenset(r) for r in results(line(), "{bad", line(memory_budget="10GB"), line(npu="X"))}
    assert len(keys) == 1


def run_cli(stdin, *args):
    return subprocess.run(
        [sys.executable, "-m", "rbln_build.estimate", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


@pytest.mark.integration
def test_cli_subprocess_round_trip():
    stdin = (
        "\n".join(
            [
                line(memory_budget=0.65),
                "",
                "not json",
                line(memory_budget="1TB", npu="RBLN-CR03", alloc={}, kv_tensors={}),
            ]
        )
        + "\n"
    )
    proc = run_cli(stdin.encode())
    assert proc.returncode == 0 and proc.stderr == b""
    out = proc.stdout.decode().splitlines()
    assert len(out) == 3
    first = json.loads(out[0])
    assert first["kvcache_num_blocks"] == 36
    # compact, sorted keys: the text is its own canonical form
    assert out[0] == json.dumps(first, sort_keys=True, separators=(",", ":"))
    assert json.loads(out[1])["error_kind"] == "invalid_request"
    assert json.loads(out[2])["error"] == (
        "memory_budget (1099511627776 bytes) exceeds the target NPU's available DRAM (150323855360 bytes)."
    )


@pytest.mark.integration
def test_cli_empty_stdin_prints_nothing():
    proc = run_cli(b"")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")


@pytest.mark.integration
def test_cli_help_explains_the_format_with_an_example_that_works():
    proc = run_cli(b"", "--help")
    assert proc.returncode == 0
    text = proc.stdout.decode()
    for field in ("npu", "memory_budget", "kv_tensors", "alloc", "DramTensor", "current_blocks", "example"):
        assert field in text
    assert EXAMPLE_IN in text
    example = run_cli(EXAMPLE_IN.encode())
    assert json.loads(example.stdout)["kvcache_num_blocks"] == 36


@pytest.mark.integration
def test_cli_does_not_import_torch_or_transformers():
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, rbln_build.estimate; "
            "print(sorted(m for m in ('torch', 'transformers', 'hydra', 'doit') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert proc.stdout.strip() == "[]"


def test_stdin_that_fails_to_read_is_exit_1_with_a_message(capsys):
    class FailingStdin(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, buffer):
            raise OSError(5, "Input/output error")

    out = io.StringIO()
    assert main([], stdin=io.BufferedReader(FailingStdin()), stdout=out) == 1
    assert "cannot read stdin" in capsys.readouterr().err and out.getvalue() == ""


def test_main_in_process_writes_one_line_per_request():
    out = io.StringIO()
    assert main([], stdin=io.BytesIO((line() + "\n\n" + line() + "\n").encode()), stdout=out) == 0
    assert [json.loads(t)["line"] for t in out.getvalue().splitlines()] == [1, 3]
