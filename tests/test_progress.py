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
import time
from pathlib import Path

import pytest

from rbln_build.progress import (
    CompileHistory,
    LineProgress,
    LiveProgress,
    Progress,
    failure_summary,
    make_progress,
    plain,
)
from rbln_build.progress._eta import TimeLeft
from rbln_build.progress._progress import FINISHING_S

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
LABEL = "tiny_llama for RBLN-CA x4 (torch)"

# A small build's worth of events, run in a child process whose stderr is a pipe or a pseudo-terminal.
SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from rbln_build.progress import make_progress
    p = make_progress(sys.argv[1] == "live", history=Path(sys.argv[2]))
    p.plan(["tiny_llama for RBLN-CA x4 (torch)", "tiny_qwen3 for RBLN-CA x4 (torch)"], 3)
    for label in ("tiny_llama for RBLN-CA x4 (torch)", "tiny_qwen3 for RBLN-CA x4 (torch)"):
        p.compile_started(label, label[:10])
        time.sleep(1.3)
        p.compile_finished(label, 1.3, True, "program", label[:10])
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
    lines = out.splitlines()
    assert lines[:4] == [
        f"[compile 1/2] {LABEL}: program in 1.3s",  # one line per finished compile, none when it starts
        "[compile 2/2] tiny_qwen3 for RBLN-CA x4 (torch): program in 1.3s",
        "[cell 2/3] tiny_qwen3.atom_max_x4.b0.3: FAILED (insufficient_memory) red",  # failed cells have a line
        "warning: a warning with a tab",
    ]
    # the count line: rate-limited (every 10 s by default), and once when the last cell is done
    assert len(lines) == 5 and re.fullmatch(
        r"\[progress 100%\] compiles 2/2 \| cells 3/3 \| 1 failed \| \d+s elapsed",
        lines[4],  # any second: load
    ), lines


def test_under_a_pseudo_terminal_the_live_display_appears(tmp_path: Path) -> None:
    history = tmp_path / "history.json"
    first = run_events("live", history, tty=True)
    assert "\r\x1b[2K" in first  # the status line is redrawn in place
    assert re.search(r"\[----------\]   0% \| compiles 0/2 \| cells 0/3 \| \d+s elapsed", first)
    # counts, percentage and times first; the running compile: its number, its time, then its label
    # (which second each redraw lands on depends on the machine's load: any second counts)
    assert re.search(
        r"0% \| compiles 0/2 \| cells 0/3 \| \d+s elapsed \| running #1 \d+s tiny_llama for RBLN-CA", first
    )
    assert f"[compile 1/2] {LABEL}: program in 1.3s\r\n" in first  # finished compiles stay as lines
    assert "[cell 2/3] tiny_qwen3.atom_max_x4.b0.3: FAILED (insufficient_memory) red\r\n" in first
    assert "warning: a warning with a tab\r\n" in first
    assert "[cell 1/3]" not in first  # successful cells only count; they do not print a line each
    before = first.split("[compile 1/2]")[0]  # no history yet: no estimate before the first compile
    assert "left" not in before and "finishing" not in before
    # the bar is of the time (elapsed over elapsed + left) while there is an estimate: it never goes back
    assert re.search(r"\[#*-*\] +\d+% \| compiles 2/2 \| cells 1/3", first)
    shown = [int(p) for p in re.findall(r"\] +(\d+)% \|", first)]
    assert shown == sorted(shown) and shown[-1] == 100, shown
    recorded = json.loads(history.read_text())["compiles"]
    assert recorded == {LABEL: [1.3], "tiny_qwen3 for RBLN-CA x4 (torch)": [1.3]}
    second = run_events("live", history, tty=True)  # now the history gives an estimate from the start
    # (the first redraw's second, and so what is left, depend on the machine's load; under
    # FINISHING_S it reads "finishing": two 1.3 s compiles and the tail's prior are about 5 s)
    assert re.search(r"compiles 0/2 \| cells 0/3 \| \d+s elapsed \| (~\d+s left|finishing)", second), second


def test_progress_false_is_plain_even_on_a_terminal(tmp_path: Path) -> None:
    out = run_events("plain", tmp_path / "history.json", tty=True)
    assert "\x1b" not in out and f"[compile 1/2] {LABEL}: program in 1.3s\r\n" in out


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


def test_time_left_spreads_the_work_over_the_workers_and_learns_from_this_run(tmp_path: Path) -> None:
    history = CompileHistory(tmp_path / "h.json")
    history.record("qwen3_8b for RBLN-CR x1 (torch) 0123456789ab", 10.0)  # the key hash is not part of "similar"
    history.record("tiny_llama for RBLN-CA x4 (torch)", 4.0)
    now = [100.0]
    p = Progress(CompileHistory(tmp_path / "h.json"), clock=lambda: now[0])
    assert p.seconds_left() is None  # nothing planned
    qwen, tiny, other = "qwen3_8b for RBLN-CR x1 (torch) fedcba987654", "tiny_llama for RBLN-CA x4 (torch)", "llama3 x1"
    p.plan([qwen, tiny, other], 6)
    tail = p.eta.tail(6)  # after the last compile: the cells, the manifest, the links (none recorded: the prior)
    assert tail == pytest.approx(p.eta.TAIL_FIXED_S + 6 * p.eta.TAIL_CELL_S)
    assert p.seconds_left() == pytest.approx(10 + 4 + 7 + tail)  # one worker; an unknown label: the known ones' mean
    p.use_workers(2)
    assert p.seconds_left() == pytest.approx(11 + tail)  # qwen (10) on one worker; tiny (4) then other (7) on the other
    p.compile_started(qwen, "k1")
    now[0] += 3
    assert p.seconds_left() == pytest.approx(11 + tail)  # 7 left of qwen; 4 + 7 on the other worker
    now[0] += 30
    assert p.seconds_left() == pytest.approx(11 + tail)  # qwen overdue (33 s spent): a fifth of that still to go
    p.compile_finished(qwen, 33.0, True, "plan", "k1")  # 3.3 x its history: the others are expected slower
    # tiny: 4 s x 3.3; the never-seen label: this run's mean (33 s); one on each worker
    assert p.seconds_left() == pytest.approx(33.0 + tail) and p.counts()[-1] == f"~{int(33.0 + tail)}s left"
    p.compile_started(tiny, "k2")
    p.compile_started(other, "k3")
    now[0] += 100  # both far overdue: never "0s left" while work remains
    assert p.seconds_left() == pytest.approx(20.0 + tail) and p.counts()[-1] == f"~{int(20.0 + tail)}s left"
    p.compile_finished(tiny, 100, True, "plan", "k2")
    p.compile_finished(other, 100, True, "plan", "k3")
    p.cell_finished("a", "ok")
    assert p.seconds_left() == pytest.approx(max(tail, 1.0))  # the tail, none of it passed yet
    now[0] += 2
    p.cell_finished("b", "ok")
    assert p.seconds_left() == 8.0  # 4 cells left, 2 s apart (more than the tail expected less the 2 s passed)
    # the bar is of the time: 135 s elapsed, 8 s left (the counts, 5 of 9 done, would say 55 %)
    assert p.running_parts() == [] and p.percent() == 94 and p.counts()[-1] == "~8s left"
    for cell in "cdef":
        now[0] += 1.0
        p.cell_finished(cell, "ok")
    assert p.seconds_left() is None  # every cell done: nothing claimed for the manifest's last moments
    p.close()  # the run's tail is recorded: 6 s after the last compile, for 6 cells
    assert CompileHistory(tmp_path / "h.json").tails == [(6, 6.0)]
    assert TimeLeft(CompileHistory(tmp_path / "h.json")).tail(6) == pytest.approx(6.0)


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


def test_a_narrow_terminal_cuts_the_labels_not_the_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    p = LiveProgress(io.StringIO(), clock=lambda: now[0])
    p.plan([LABEL, "tiny_qwen3 for RBLN-CA x4 (torch)"], 3)
    p.use_workers(2)
    p.compile_started(LABEL, "k1")
    now[0] += 75
    p.compile_finished(LABEL, 75.0, True, "program", "k1")
    p.compile_started("tiny_qwen3 for RBLN-CA x4 (torch)", "k2")
    now[0] += 5
    monkeypatch.setenv("COLUMNS", "200")
    assert p.status() == (  # the bar is of the time: 80 s of 152 s (70 s of the compile, 2.3 s of the tail)
        "[#####-----]  52% | compiles 1/2 | cells 0/3 | 1m20s elapsed | ~1m12s left"
        " | running #2 5s tiny_qwen3 for RBLN-CA x4 (torch)"
    )
    monkeypatch.setenv("COLUMNS", "80")
    assert p.status() == "[#####-----]  52% | compiles 1/2 | cells 0/3 | 1m20s elapsed | ~1m12s left | r…"
    p.close()


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
    assert re.fullmatch(r"\[compile 1/4\] llama3_2_1b for RBLN-CA x4 \(plan\): plan in \d+\.\ds", lines[0]), lines
    assert re.fullmatch(r"\[progress 100%\] compiles 4/4 \| cells 8/8 \| \d+s elapsed", lines[-1]), lines
    live = read_pty(args, env)
    assert "compiles 4/4 | cells 8/8" in live and "[cell " not in live and "[compile " not in live
    # doit's state lost: its tasks run again and find the compiles in the cache: they count as done
    (tmp_path / "build" / ".doit.sqlite3").unlink()
    again = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0 and "[compile " not in again.stderr, again.stderr
    assert again.stderr.splitlines()[-1].startswith("[progress 100%] compiles 4/4 | cells 8/8 | ")


def read_pty(args: list[str], env: dict[str, str]) -> str:
    """What ``args`` writes to its stderr, a pseudo-terminal."""
    return "".join(text for _, text in read_pty_timed(args, env))


def read_pty_timed(args: list[str], env: dict[str, str]) -> list[tuple[float, str]]:
    """What ``args`` writes to its stderr (a pseudo-terminal), in chunks with the time each arrived."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        chunks.append((time.monotonic(), data.decode("utf-8", "replace")))
    os.close(master)
    assert proc.wait(timeout=600) == 0, "".join(c for _, c in chunks)
    return chunks


# matrix=plans with the SlowBackend: four compiles that linger 1, 6, 4 and 2 s after their plan
DURATIONS = "llama3_2_1b.RBLN-CA=1,llama3_2_1b.RBLN-CR=6,qwen3_8b.RBLN-CA=4,qwen3_8b.RBLN-CR=2"


@pytest.mark.integration
def test_two_workers_show_real_start_times_and_never_zero_time_left(tmp_path: Path) -> None:
    """Under a pseudo-terminal with jobs=2, compiles of known, different durations: a compile is
    running from when a worker starts it, so no shown time exceeds the compile's real one (the
    worker's measure, in its finished line) by more than a second; at most two run at once; each
    keeps its number from start to finish; and the time left never reads 0 while work remains."""
    args = [
        sys.executable, "-m", "rbln_build.cli", "matrix=plans", "matrix.backend=rbln_test_plugins:SlowBackend",
        "jobs=2", f"build_dir={tmp_path / 'build'}",
    ]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", TERM="xterm", COLUMNS="250", RBLN_TEST_SLEEP_BY=DURATIONS)
    env.pop("CI", None)
    out = read_pty(args, env)
    statuses = [s for s in re.split(r"\r\x1b\[2K|\r?\n", out) if s.startswith("[")]
    finished = {
        int(m[1]): (m[2], float(m[3]))
        for m in re.finditer(r"\[compile (\d)/4\] (.+?): plan \(worker \S+:\d+\) in (\d+\.\d)s", out)
    }
    assert sorted(finished) == [1, 2, 3, 4], out
    shown = 0
    for status in statuses:
        if "% | compiles" not in status:
            continue
        assert len(re.findall(r"#\d \d+s ", status)) <= 2, status  # two workers: queued compiles are not running
        running = re.findall(r"#(\d) (\d+)s (.+? \(rbln_test_plugins:SlowBackend\))", status)
        for number, seconds, label in running:
            real_label, real = finished[int(number)]
            assert label == real_label, status  # one number per compile, start to finish
            assert int(seconds) <= real + 1, (status, real)
            shown += 1
        done = re.search(r"compiles (\d)/4 \| cells (\d)/8", status)
        assert done is not None, status
        if done.groups() != ("4", "8"):
            assert "~0s left" not in status, status
    assert shown >= 8  # the running compiles were on screen
    assert any("s left" in s or "finishing" in s for s in statuses)  # after the first compile, an estimate
    sleeps = dict(item.split("=") for item in DURATIONS.split(","))
    for label, real in finished.values():  # each took at least its known linger
        model, family = label.split(" ")[0], label.split(" ")[2]
        assert float(sleeps[f"{model}.{family}"]) <= real, (label, real)


def test_a_worker_that_ends_skips_the_interpreters_teardown(tmp_path: Path) -> None:
    """A local pool's worker leaves without the interpreter's teardown: an exit handler registered in
    it never runs, and it exits with status 0. That teardown (the collection of torch's objects) held a
    torch build's summary back for 10-16 s while the pool shut down; `bench/parallel.py` measures the
    time from the last cell to the summary."""
    from rbln_build.execution._jobs import StoreRef
    from rbln_build.execution._workers import LocalPool

    marker = tmp_path / "teardown-ran"
    pool = LocalPool(StoreRef(root=str(tmp_path / "cache")), jobs=1)
    code = f"import atexit, pathlib; atexit.register(pathlib.Path({str(marker)!r}).write_text, 'ran')"
    pool._pool.submit(exec, code).result(timeout=120)  # registered in the worker, as torch's objects live there
    workers = list(pool._pool._processes.values())
    pool.close(cancel=False)
    assert [w.exitcode for w in workers] == [0]
    assert not marker.exists()


def test_each_distinct_cell_warning_is_said_once_with_its_cells() -> None:
    from rbln_build.progress import warning_summary

    int_budget = "memory_budget is the int 30, i.e. 30 byte(s), less than 1 MiB. An int is a byte count: ..."
    entries = [{"cell": f"m{i}.d.b30", "warnings": [int_budget]} for i in range(5, 0, -1)]
    entries += [{"cell": "x.d.b0.3", "warnings": ["another\nwarning"]}, {"cell": "y.d.b0.3", "warnings": []}]
    assert warning_summary(entries) == [
        f"warning (5 cells: m1.d.b30, m2.d.b30, m3.d.b30 and 2 more): {int_budget}",
        "warning (1 cell: x.d.b0.3): another warning",
    ]
    assert warning_summary(entries[-1:]) == []


def test_an_up_to_date_compile_counts_even_when_a_shown_one_has_its_label() -> None:
    """doit's reporter tells the display which compiles were up to date; the scheduler's shown ones are
    known by compile key, as two compiles can share a label (one model for two devices of one target)."""
    from types import SimpleNamespace

    from rbln_build.progress import doit_reporter

    p = Progress()
    p.plan([LABEL, LABEL], 2)
    shown = {"k1", "c1"}  # the scheduler built compile k1 and cell c1
    compiles = {"m.RBLN-CA.x4.k1": ("k1", LABEL), "m.RBLN-CA.x4.k2": ("k2", LABEL)}
    reporter = doit_reporter(p, compiles, lambda: shown, {"m.RBLN-CA.x4.k2": ["c2"]})({}, {})
    p.compile_started(LABEL, "k1")
    p.compile_finished(LABEL, 1.0, True, "plan", "k1")
    p.cell_finished("c1", "ok")
    for name in ("compile:m.RBLN-CA.x4.k1", "compile:m.RBLN-CA.x4.k2", "cells:m.RBLN-CA.x4.k2"):
        reporter.skip_uptodate(SimpleNamespace(name=name))
    assert (p.compiles_done, p.compiles_total, p.cells_done, p.cells_total) == (2, 2, 2, 2)


def test_without_history_a_compile_is_expected_to_take_what_its_model_took_in_this_run() -> None:
    """A first build (no history): tiny_qwen3's second compile is expected to take what its first one
    took (24 s), not the mean of every compile so far, which plans' 0.1 s pulled down to 8 s (the status
    then read "~3s left" for a compile 10 s from its end)."""
    now = [0.0]
    p = Progress(clock=lambda: now[0])
    ca, cr = "tiny_qwen3 for RBLN-CA x4 (torch)", "tiny_qwen3 for RBLN-CR x1 (torch)"
    plans = ["llama3_2_1b for RBLN-CA x4 (torch)", "llama3_2_1b for RBLN-CR x1 (torch)"]
    p.plan([ca, cr, *plans], 4)
    p.use_workers(2)
    p.compile_started(ca, "k1")
    now[0] = 10
    p.compile_started(cr, "k2")
    now[0] = 24
    p.compile_finished(ca, 24.0, True, "program", "k1")
    for i, label in enumerate(plans):
        p.compile_started(label, f"p{i}")
        p.compile_finished(label, 0.1, True, "plan", f"p{i}")
    assert p.seconds_left() == pytest.approx(10.0 + p.eta.tail(4))  # cr: 24 s expected, 14 s spent; the tail


class _Writes(io.StringIO):
    """A stream that counts its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


BATCH = [
    ("m.atom_max.b0.1", "FAILED (insufficient_memory)", False),
    ("m.atom_max.b0.2", "FAILED (insufficient_memory) \x1b[31mred\x1b[0m", False),
    ("m.atom_max.b0.3", "8 blocks (full 8, floor 5), plan", True),
    ("m.atom_max.b0.4", "FAILED (insufficient_memory) (expected)", True),
]


@pytest.mark.parametrize("kind", [LineProgress, LiveProgress])
def test_a_batch_of_finished_cells_shows_as_its_cells_would_in_one_write(kind: type[Progress]) -> None:
    """A worker's batch (``cells_finished``) is counted and shown as the same cells one by one would
    be, in one write of its failure lines instead of one per cell (10,008 cells: 2,710 failure lines)."""
    one, batch = _Writes(), _Writes()
    clock = lambda: 100.0  # noqa: E731  # no count line between events (none is due)
    shown = []
    for out, feed in ((one, None), (batch, BATCH)):
        p = kind(out, clock=clock)  # type: ignore[call-arg]
        p.plan(0, len(BATCH))
        before = out.writes
        if feed is None:
            for cell_id, text, ok in BATCH:
                p.cell_finished(cell_id, text, ok)
        else:
            p.cells_finished(feed)
        assert (p.cells_done, p.failed) == (4, 2)
        shown.append((out.getvalue(), out.writes - before))
        p.close()
    (text_one, writes_one), (text_batch, writes_batch) = shown
    failures = [
        "[cell 1/4] m.atom_max.b0.1: FAILED (insufficient_memory)",
        "[cell 2/4] m.atom_max.b0.2: FAILED (insufficient_memory) red",
    ]
    for text in (text_one, text_batch):
        assert [line for line in failures if line in text] == failures and "b0.3" not in text and "b0.4" not in text
    if kind is LineProgress:
        assert text_batch == text_one  # the same lines, the count line where the batch ends included
    assert writes_batch < writes_one


# The default matrix's 8 compiles as a fresh build on 2 workers ran them (measured, CI=1 log): each
# worker's first program also imports torch and transformers (its warm-up, ~8 s); tiny_llama (2
# layers) took ~3.7 s, tiny_qwen3 (3 layers) ~4.1 s; the 4 plans 0.0-0.1 s; then 18 cells.
FRESH = [  # label, units (compile_units), seconds without warm-up
    ("tiny_llama for RBLN-CA x4 (torch)", 3.0, 3.7),
    ("tiny_llama for RBLN-CR x1 (torch)", 3.0, 4.2),
    ("tiny_qwen3 for RBLN-CA x4 (torch)", 4.0, 3.9),
    ("tiny_qwen3 for RBLN-CR x1 (torch)", 4.0, 4.4),
    ("llama3_2_1b for RBLN-CA x4 (plan)", 17.0, 0.1),
    ("llama3_2_1b for RBLN-CR x1 (plan)", 17.0, 0.05),
    ("qwen3_8b for RBLN-CA x4 (plan)", 37.0, 0.1),
    ("qwen3_8b for RBLN-CR x1 (plan)", 37.0, 0.05),
]


def fresh_build_events(warmup: float, scale: float) -> list[tuple[float, str, str, float, float]]:
    """(time, event, label, seconds, warm-up) of a fresh build of FRESH on 2 workers, compile times x
    ``scale``: each compile to the worker that frees first; a worker's first program pays ``warmup``."""
    free, warm, events = [0.0, 0.0], [False, False], []
    for label, _, seconds in FRESH:
        w = min((0, 1), key=lambda i: free[i])
        start = free[w]
        pays = warmup if not warm[w] and "(plan)" not in label else 0.0
        warm[w] = warm[w] or pays > 0
        end = start + pays + seconds * scale
        events += [(start, "start", label, 0.0, 0.0), (end, "finish", label, end - start, pays)]
        free[w] = end
    return sorted(events, key=lambda e: (e[0], e[1] == "start"))


TAIL_S = 2.3  # after the default matrix's last compile: its cells, the manifest, the links (bench/eta.py)


def _shown(p: Progress) -> str | None:
    """What the display says of the time left: ``~12s left``, ``finishing`` or None (nothing)."""
    said = [part for part in p.counts() if part.endswith(" left") or part == "finishing"]
    return said[0] if said else None


@pytest.mark.parametrize(
    "warmup, scale, tail, recorded",
    [
        pytest.param(8.0, 1.0, TAIL_S, None, id="as-measured"),
        pytest.param(40.0, 1.0, TAIL_S, None, id="slow-imports"),
        pytest.param(2.0, 5.0, TAIL_S, None, id="slow-compiles"),
        pytest.param(8.0, 1.0, 0.3, None, id="short-tail"),
        pytest.param(8.0, 1.0, 40.0, 40.0, id="long-tail-recorded"),  # a big manifest, known from a run before
    ],
)
def test_on_a_fresh_build_dir_the_time_left_is_honest_from_the_first_compile_to_the_end(
    tmp_path: Path, warmup: float, scale: float, tail: float, recorded: float | None
) -> None:
    """A scripted clock replays a fresh build of the default matrix (no compile history): its
    compiles, their cells as each compile ends, and after the last compile the run's tail (the
    last cells, the manifest, the links: 2.3 s measured). At every quarter second and every event
    from the first finished compile to the end, the display shows a time within 2x of the truth,
    or "finishing" (never while more than 2 x FINISHING_S is left), or nothing once every cell is
    done; while a tenth of the build is left it shows a time. Plans are expected to take a plan's
    time, the warm-up is counted apart, and the tail is counted (a recorded one when there is)."""
    history = CompileHistory(tmp_path / "h.json")
    if recorded is not None:
        history.record_tail(18, recorded)
    now = [0.0]
    p = Progress(CompileHistory(tmp_path / "h.json"), clock=lambda: now[0])
    p.plan([label for label, _, _ in FRESH], 18, units={label: units for label, units, _ in FRESH})
    p.use_workers(2)
    events = fresh_build_events(warmup, scale)
    last = events[-1][0]
    end = last + tail
    cells = [f"c{i}" for i in range(18)]
    timeline = [(at, what, label, seconds, pays) for at, what, label, seconds, pays in events]
    for at, what, _, _, _ in events:  # each compile's 2 cells as it ends; the last 4 in the tail
        if what == "finish" and at < last:
            timeline += [(at + 0.01, "cell", cells.pop(), 0.0, 0.0), (at + 0.02, "cell", cells.pop(), 0.0, 0.0)]
    timeline += [(last + tail * (k + 1) / 5, "cell", c, 0.0, 0.0) for k, c in enumerate(cells)]
    timeline.sort(key=lambda e: (e[0], e[1] != "finish", e[1] == "start"))
    bad, sampled = [], []
    for i, (at, what, label, seconds, pays) in enumerate([*timeline, (end, "end", "", 0.0, 0.0)]):
        before = timeline[i - 1][0] if i else at
        for t in [q / 4 for q in range(int(before * 4) + 1, int(at * 4) + 1) if q / 4 < at] + [at]:
            now[0] = t
            truth, shown = end - t, _shown(p)
            if not p.compiles_done or truth <= 0:
                continue
            if shown is None:
                ok = p.cells_done == p.cells_total
            elif shown == "finishing":
                ok = truth <= 2 * FINISHING_S
            else:
                ok = 0.5 <= p.seconds_left() / truth <= 2.0  # type: ignore[operator]
            if not ok:
                bad.append((round(t, 2), round(truth, 2), shown, p.seconds_left()))
            sampled.append(t)
        if what == "start":
            p.compile_started(label, label)
        elif what == "finish":
            p.compile_finished(label, seconds, True, "program", label, warmup_s=pays)
        elif what == "cell":
            p.cell_finished(label, "ok")
    assert sampled and not bad, bad
    p.close()
    assert CompileHistory(tmp_path / "h.json").tails[-1] == (18, pytest.approx(tail))  # the next run knows it


def test_a_history_of_the_schema_whose_durations_held_the_warm_up_is_not_used(tmp_path: Path) -> None:
    """Schema 1 recorded each worker's first compile with its imports; read as a prior, that made a
    rerun on a loaded machine say "~5s left" with 23 s to go. It reads as empty (no estimate yet)."""
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"schema": 1, "compiles": {LABEL: [11.7]}}))
    assert CompileHistory(path).seconds == {}
    history = CompileHistory(path)
    history.record(LABEL, 11.7, warmup_s=8.0)  # rewritten in schema 2: the compile and the warm-up apart
    again = CompileHistory(path)
    assert again.seconds == {LABEL: [3.7]} and again.warmups == [8.0]
