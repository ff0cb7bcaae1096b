"""Build progress: plain lines without a terminal (no control characters), a live display under a
pseudo-terminal, the time-left estimate from the history file, and the failure summary by kind."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rbln_build.pipeline._progress import (
    CompileHistory,
    LineProgress,
    LiveProgress,
    Progress,
    failure_summary,
    make_progress,
    plain,
)

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
LABEL = "tiny_llama for RBLN-CA x4 (torch)"

# A small build's worth of events, run in a child process whose stderr is a pipe or a pseudo-terminal.
SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from rbln_build.pipeline._progress import make_progress
    p = make_progress(sys.argv[1] == "live", history=Path(sys.argv[2]))
    p.plan(["tiny_llama for RBLN-CA x4 (torch)", "tiny_qwen3 for RBLN-CA x4 (torch)"], 3)
    for label in ("tiny_llama for RBLN-CA x4 (torch)", "tiny_qwen3 for RBLN-CA x4 (torch)"):
        p.compile_started(label)
        time.sleep(1.3)
        p.compile_finished(label, 1.3, True, "program")
    p.cell_finished("tiny_llama.atom_max_x4.b0.3", "8 blocks (full 8, floor 5), program")
    p.cell_finished("tiny_qwen3.atom_max_x4.b0.3", "FAILED (insufficient_memory) \\x1b[31mred\\x1b[0m", ok=False)
    p.warn("a warning\\twith a tab")
    p.cell_finished("tiny_qwen3.atom_max_x4.b0.5", "16 blocks (full 16, floor 9), program")
    p.close()
    """
)


def run_events(mode: str, history: Path, tty: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(TERM="xterm", COLUMNS="160")
    if not tty:
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT, mode, str(history)], capture_output=True, text=True, env=env, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, mode, str(history)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) == 0
    return b"".join(chunks).decode("utf-8", "replace")


def test_without_a_terminal_the_log_is_plain_lines(tmp_path: Path) -> None:
    out = run_events("live", tmp_path / "history.json", tty=False)  # live asked for, but stderr is a pipe
    assert not CONTROL.search(out.replace("\n", ""))  # no control characters but the newlines
    assert out.splitlines() == [
        f"[compile 1/2] {LABEL} ...",
        f"[compile 1/2] {LABEL}: program in 1.3s",
        "[compile 2/2] tiny_qwen3 for RBLN-CA x4 (torch) ...",
        "[compile 2/2] tiny_qwen3 for RBLN-CA x4 (torch): program in 1.3s",
        "[cell 1/3] tiny_llama.atom_max_x4.b0.3: 8 blocks (full 8, floor 5), program",
        "[cell 2/3] tiny_qwen3.atom_max_x4.b0.3: FAILED (insufficient_memory) red",
        "warning: a warning with a tab",
        "[cell 3/3] tiny_qwen3.atom_max_x4.b0.5: 16 blocks (full 16, floor 9), program",
    ]


def test_under_a_pseudo_terminal_the_live_display_appears(tmp_path: Path) -> None:
    history = tmp_path / "history.json"
    first = run_events("live", history, tty=True)
    assert "\r\x1b[2K" in first  # the status line is redrawn in place
    assert "compiles 0/2 | cells 0/3" in first
    assert re.search(r"compiles 0/2 \| cells 0/3 \| compiling tiny_llama for RBLN-CA x4 \(torch\) 1s", first), first
    assert f"compiled {LABEL}: program in 1.3s\r\n" in first  # finished compiles stay as lines
    assert "cell tiny_qwen3.atom_max_x4.b0.3: FAILED (insufficient_memory) red\r\n" in first
    assert "warning: a warning with a tab\r\n" in first
    assert "[cell " not in first  # successful cells only count; they do not print a line each
    assert "left" not in first.split("compiled")[0]  # no history yet: no estimate before the first compile
    recorded = json.loads(history.read_text())["compiles"]
    assert recorded == {LABEL: [1.3], "tiny_qwen3 for RBLN-CA x4 (torch)": [1.3]}
    second = run_events("live", history, tty=True)  # now the history gives an estimate from the start
    assert "compiles 0/2 | cells 0/3 | ~3s left" in second


def test_progress_false_is_plain_even_on_a_terminal(tmp_path: Path) -> None:
    out = run_events("plain", tmp_path / "history.json", tty=True)
    assert "\x1b" not in out and f"[compile 1/2] {LABEL} ...\r\n" in out


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    "live, env, kind",
    [
        pytest.param(True, {"TERM": "xterm"}, LiveProgress, id="terminal"),
        pytest.param(True, {"TERM": "xterm", "CI": "true"}, LineProgress, id="ci"),
        pytest.param(True, {"TERM": "dumb"}, LineProgress, id="dumb-terminal"),
        pytest.param(False, {"TERM": "xterm"}, LineProgress, id="progress-false"),
    ],
)
def test_which_display(live: bool, env: dict[str, str], kind: type) -> None:
    progress = make_progress(live, FakeTty(), env=env)
    assert type(progress) is kind
    progress.close()
    assert type(make_progress(live, io.StringIO(), env=env)) is LineProgress  # not a terminal


def test_time_left_counts_running_and_pending_compiles(tmp_path: Path) -> None:
    history = CompileHistory(tmp_path / "h.json")
    history.record("qwen3_8b for RBLN-CR x1 (torch) 0123456789ab", 10.0)  # the key hash is not part of "similar"
    history.record("tiny_llama for RBLN-CA x4 (torch)", 4.0)
    now = [100.0]
    p = Progress(CompileHistory(tmp_path / "h.json"), clock=lambda: now[0])
    assert p.seconds_left() is None  # nothing planned
    p.plan(["qwen3_8b for RBLN-CR x1 (torch) fedcba987654", "tiny_llama for RBLN-CA x4 (torch)", "llama3 x1"], 6)
    assert p.seconds_left() == 10 + 4 + 7  # an unknown label counts the mean of the known ones
    p.compile_started("qwen3_8b for RBLN-CR x1 (torch) fedcba987654")
    now[0] += 3
    assert p.seconds_left() == 7 + 4 + 7
    now[0] += 30
    assert p.seconds_left() == 0 + 4 + 7  # overdue: it counts as finishing now


def test_history_keeps_the_last_runs_and_survives_a_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    history = CompileHistory(path)
    for s in range(12):
        history.record("a b", float(s))
    assert CompileHistory(path).seconds["a b"] == [4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]
    assert CompileHistory(path).expected("a b") == 7.5
    assert CompileHistory(path).expected("a other") == 7.5  # same model, another target
    path.write_text("{broken")
    assert CompileHistory(path).seconds == {}


def test_plain_strips_every_control_character() -> None:
    assert plain("a\x1b[1;31mb\x1b[0m\tc\r\nd\x07e\x9bf") == "ab c  def"


def entry(cell: str, status: str, kind: str | None, error: str | None) -> dict[str, object]:
    return {"cell": cell, "status": status, "error_kind": kind, "error": error}


def test_failures_are_summarized_by_kind_with_a_count_and_an_example() -> None:
    entries = [entry(f"m.d.b{i}", "failed", "insufficient_memory", f"only {i} blocks") for i in range(1500, 0, -1)]
    entries += [entry("x.d.b1.5", "failed", "budget_exceeds_dram", "memory_budget (...) exceeds ...")]
    entries += [entry("y.d.b0.3", "unexpected_success", None, "expected to fail ... but it built")]
    entries += [entry("z.d.b0.3", "expected_failure", "insufficient_memory", "declared")]
    entries += [entry("ok.d.b0.3", "ok", None, None)]
    assert failure_summary(entries) == [
        "1502 failed cell(s) by kind:",
        "  insufficient_memory   1,500  e.g. m.d.b1: only 1 blocks",
        "  budget_exceeds_dram       1  e.g. x.d.b1.5: memory_budget (...) exceeds ...",
        "  unexpected_success        1  e.g. y.d.b0.3: expected to fail ... but it built",
    ]
    assert failure_summary(entries[-2:]) == []


def test_a_real_build_logs_plain_lines_and_a_rebuild_counts_what_was_up_to_date(tmp_path: Path) -> None:
    """The wiring in the doit tasks: through a pipe, one plain line per compile and cell; under a
    pseudo-terminal, a no-op rebuild's status line counts every compile and cell as done (doit's
    up-to-date skips reach the display through its reporter)."""
    from memory_helpers import _CACHE, inventory

    for name in ("qwen3_8b", "llama3_2_1b"):
        inventory(name)
    (tmp_path / "inv").mkdir()
    os.symlink(_CACHE, tmp_path / "inv" / "inventory")
    # jobs=1: the doit tasks themselves run the stages, in order (jobs=N's lines: tests/test_parallel.py)
    args = [
        sys.executable,
        "-m",
        "rbln_build.cli",
        "matrix=plans",
        "jobs=1",
        f"build_dir={tmp_path / 'build'}",
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", RBLN_BUILD_CACHE=str(tmp_path / "inv"), TERM="xterm")
    env.pop("CI", None)
    first = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert first.returncode == 0, first.stderr
    assert not CONTROL.search(first.stderr.replace("\n", ""))
    lines = first.stderr.splitlines()
    assert lines[:2] == ["[compile 1/4] llama3_2_1b for RBLN-CA x4 (torch) ...", lines[1]] and re.fullmatch(
        r"\[compile 1/4\] .*: plan in \d+\.\ds", lines[1]
    )
    assert "[cell 8/8] qwen3_8b.rebel100.b0.5: 40 blocks (full 40, floor 9), plan" in lines
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=600) == 0
    live = b"".join(chunks).decode("utf-8", "replace")
    assert "\r\x1b[2Kcompiles 4/4 | cells 8/8" in live and "[cell " not in live and "compiled " not in live
