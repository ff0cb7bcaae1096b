"""Programs are verified as data before any loader sees them (docs/security.md, "Artifacts are code").

* torch 2.13's loader hands every ``expr_str`` of the graph to ``sympy.sympify`` (which evaluates
  Python): a crafted cell whose expression creates a marker folder is refused by ``run`` (exit 2,
  one line) and the marker never appears; torch itself runs the same payload;
* ``guards_code`` (exec'd by ``ExportedProgram.module()``) and node targets (resolved from ``torch``
  by attribute, then called) are held to the forms torch writes;
* every string our own programs hold passes (both tiny recipes);
* ``run CELL`` checks the whole ``rbln-build.json``: each edit is one line, exit 2, no traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from _torch_cells import finalized, own_copy, run_here  # noqa: E402

from rbln_build.backends.torch._archive import check_program_archive  # noqa: E402
from rbln_build.backends.torch._graph import check_guard, check_sym_expr, check_target  # noqa: E402
from rbln_build.errors import IntegrityError  # noqa: E402

S = "Symbol('s32', positive=True, integer=True)"


@pytest.fixture
def cell(tmp_path: Path) -> Path:
    return own_copy("tiny_llama", 5, tmp_path / "cell")


def _graph(program: bytes) -> tuple[str, dict[str, Any]]:
    archive = zipfile.ZipFile(io.BytesIO(program))
    name = next(n for n in archive.namelist() if "/models/" in n)
    return name, json.loads(archive.read(name))


def _with_graph(program: bytes, graph: dict[str, Any]) -> bytes:
    name, _ = _graph(program)
    src = zipfile.ZipFile(io.BytesIO(program))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            dst.writestr(info, json.dumps(graph).encode() if info.filename == name else src.read(info.filename))
    return out.getvalue()


def _install(cell: Path, program: bytes) -> None:
    """What an attacker who can write the folder does: the program and its recorded digest."""
    (cell / "program.pt2").write_bytes(program)
    record = json.loads((cell / "rbln-build.json").read_text())
    record["programs"]["program.pt2"] = hashlib.sha256(program).hexdigest()
    (cell / "rbln-build.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def _expressions(graph: Any) -> list[str]:
    found: list[str] = []
    stack = [graph]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "expr_str" in item:
                found.append(item["expr_str"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def test_a_sympify_payload_in_an_expression_is_refused_by_run(cell: Path, tmp_path: Path, capsys) -> None:
    import torch

    marker = tmp_path / "payload-ran"
    program = (cell / "program.pt2").read_bytes()
    _, graph = _graph(program)
    values = graph["graph_module"]["graph"]["sym_int_values"]
    first = sorted(values)[0]
    symbol = values[first]["as_expr"]["expr_str"]
    values[first]["as_expr"]["expr_str"] = f"(__import__('os').mkdir({str(marker)!r}), {symbol})[1]"
    crafted = _with_graph(program, graph)
    # The payload is live: torch.export.load evaluates it (and then loads the program).
    with contextlib.suppress(Exception):
        torch.export.load(io.BytesIO(crafted))
    assert marker.is_dir()
    marker.rmdir()
    _install(cell, crafted)  # digest consistent: only the graph check stands between the payload and sympify
    proc = run_here(capsys, str(cell), "--prompt-ids", "1,2,3", "--max-new-tokens", "2")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "models/model.json" in proc.stderr and "evaluate it as Python code" in proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    "where, value",
    [
        pytest.param("guards_code", "__import__('os').mkdir('{m}') or L['input_ids'].size()[0] >= 1", id="guard"),
        pytest.param("target", "torch.os.mkdir", id="node-target"),
        pytest.param("range", "Symbol('s32', positive=True, integer=True).__class__", id="attribute"),
    ],
)
def test_code_in_guards_and_targets_is_refused_by_run(
    cell: Path, tmp_path: Path, capsys, where: str, value: str
) -> None:
    marker = tmp_path / "payload-ran"
    program = (cell / "program.pt2").read_bytes()
    _, graph = _graph(program)
    if where == "guards_code":
        graph["guards_code"].append(value.format(m=marker))
    elif where == "target":
        graph["graph_module"]["graph"]["nodes"][0]["target"] = value
    else:
        graph["graph_module"]["graph"]["tensor_values"]["input_ids"]["sizes"][0]["as_expr"]["expr_str"] = value
    _install(cell, _with_graph(program, graph))
    proc = run_here(capsys, str(cell), "--prompt-ids", "1,2,3", "--max-new-tokens", "2")
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    assert "Refusing to load it" in proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize("recipe", ["tiny_llama", "tiny_qwen3"])
def test_every_string_our_programs_hold_passes(recipe: str) -> None:
    program = (finalized(recipe, 5) / "program.pt2").read_bytes()
    check_program_archive(program, Path("program.pt2"))
    _, graph = _graph(program)
    expressions = _expressions(graph)
    assert expressions and any(e.startswith("Mul(") for e in expressions)  # the forms are really exercised
    assert graph["guards_code"]


@pytest.mark.parametrize(
    "text",
    [
        S,
        "Integer(-128)",
        f"Add(Mul(Integer(128), {S}), Integer(-128))",
        f"Min(Integer(128), Mul(Integer(128), {S}))",
        f"FloorDiv({S}, Integer(2))",
        f"Mod({S}, Integer(3))",
        f"Mul(Rational(1, 2), {S})",
        f"Pow({S}, Integer(2))",
        f"And(StrictGreaterThan({S}, Integer(1)), Equality({S}, Integer(4)))",
        "true",
    ],
)
def test_expressions_torch_writes_pass(text: str) -> None:
    check_sym_expr(text)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("__import__('os').system('true')", id="call-of-a-call"),
        pytest.param("Symbol('s0').__class__", id="attribute"),
        pytest.param("Symbol('__import__')", id="symbol-name"),
        pytest.param("Symbol('s0', evaluate=print)", id="symbol-keyword"),
        pytest.param("Integer(10**9)", id="integer-arithmetic"),
        pytest.param("Integer(2**70)", id="huge-integer"),
        pytest.param("Pow(Integer(10), Integer(100000))", id="huge-power"),
        pytest.param("lambda: 0", id="lambda"),
        pytest.param("exec", id="bare-name"),
        pytest.param("Function('f')(Integer(1))", id="other-function"),
        pytest.param("Mul(Integer(1), x)", id="undeclared-name"),
        pytest.param("Add(" * 300 + ")" * 300, id="deep"),
        pytest.param("Integer('1')", id="string-integer"),
        pytest.param(3, id="not-a-string"),
    ],
)
def test_anything_else_is_refused(text: Any) -> None:
    with pytest.raises(ValueError):
        check_sym_expr(text)


def test_guards_and_targets() -> None:
    check_guard("(L['cache_position'].size()[1]*L['cache_position'].size()[0]) == (L['input_ids'].size()[1])")
    check_guard("L['kv_pools'][1].size()[0] == L['kv_pools'][0].size()[0]")
    check_target("torch.ops.aten._assert_tensor_metadata.default")
    check_target("_operator.mul")
    for guard in [
        "L['x'].size()[0] == __import__('os').getpid()",
        "L['x'].numpy()[0] == 1",
        "L['x\"); import os; (\"'].size()[0] == 1",
        "G['x'].size()[0] == 1",
        "L['x'].size() == 1",
    ]:
        with pytest.raises(ValueError):
            check_guard(guard)
    for target in ["torch.os.system", "torch.ops.aten.__class__.x", "builtins.eval", "#ext", "torch.load", 1]:
        with pytest.raises(ValueError):
            check_target(target)


def test_a_graph_input_that_is_a_string_is_refused(cell: Path) -> None:
    program = (cell / "program.pt2").read_bytes()
    _, graph = _graph(program)
    graph["graph_module"]["graph"]["inputs"].append({"as_string": "x' or __import__('os') or '"})
    with pytest.raises(IntegrityError, match="only tensors and sym ints"):
        check_program_archive(_with_graph(program, graph), Path("program.pt2"))


# -- the whole record ----------------------------------------------------------------------------


def _edit(cell: Path, change: dict[str, Any]) -> None:
    path = cell / "rbln-build.json"
    record = json.loads(path.read_text())
    for key, value in change.items():
        if key.startswith("kv_pool."):
            record["kv_pool"][key.split(".", 1)[1]] = value
        else:
            record[key] = value
    path.write_text(json.dumps(record))


@pytest.mark.parametrize(
    "change, message",
    [
        pytest.param({"kvcache_num_blocks": 8}, "kv_pool.num_blocks is 5 but kvcache_num_blocks is 8", id="blocks"),
        pytest.param(
            {"kvcache_num_blocks": 9, "kv_pool.num_blocks": 9}, "more than the full pool of 8", id="blocks-consistent"
        ),
        pytest.param({"kvcache_num_blocks": "5"}, "kvcache_num_blocks is '5'", id="blocks-string"),
        pytest.param({"kvcache_num_blocks": True}, "kvcache_num_blocks is True", id="blocks-bool"),
        pytest.param({"kvcache_num_blocks": 2**60}, "from 1 to 1,048,576", id="blocks-huge"),
        pytest.param({"batch_size": 0}, "batch_size is 0", id="batch-zero"),
        pytest.param({"batch_size": 64}, "batch_size is 64, more than the", id="batch-beyond-program"),
        pytest.param({"dtype": "os"}, "dtype is 'os'", id="dtype"),
        pytest.param({"kv_pool.dtype": "complex128"}, "kv_pool.dtype is 'complex128'", id="pool-dtype"),
        pytest.param({"kv_pool.head_dim": 64}, "pool input 0", id="head-dim"),
        pytest.param({"kv_pool.num_layers": 3, "kv_pool.layer_types": ["a"] * 3}, "takes 4 pools", id="layers"),
        pytest.param({"kv_pool": []}, "kv_pool must be an object", id="pool-type"),
        pytest.param({"attn_impl": None}, "attn_impl is None", id="attn"),
        pytest.param({"prefill_chunk_size": 1.5}, "prefill_chunk_size is 1.5", id="chunk-float"),
        pytest.param({"recipe": "../x"}, "recipe:", id="recipe-name"),
        pytest.param({"max_seq_len": -1}, "max_seq_len is -1", id="seq-negative"),
        pytest.param(
            {"max_seq_len": 8192},
            "max_seq_len (a whole prompt in one call) is 8192, more than the 4096",
            id="seq-beyond-program",
        ),
    ],
)
def test_run_refuses_an_edited_record_with_one_line(cell: Path, capsys, change: dict[str, Any], message: str) -> None:
    assert json.loads((cell / "rbln-build.json").read_text())["kvcache_num_blocks"] == 5
    _edit(cell, change)
    proc = run_here(capsys, str(cell), "--prompt-ids", "1,2,3", "--max-new-tokens", "2")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert message in proc.stderr and "rbln-build.json" in proc.stderr


def test_an_untouched_cell_runs(cell: Path, capsys) -> None:
    proc = run_here(capsys, str(cell), "--prompt-ids", "1,2,3", "--max-new-tokens", "2")
    assert proc.returncode == 0 and proc.stdout.startswith("prompt 0: "), proc.stderr


# -- entries from a cache are checked as data too ----------------------------------------------------


def _forged(cell: Path, marker: Path) -> Path:
    """A consistent cell whose program carries a sympify payload (digest recorded to match)."""
    program = (cell / "program.pt2").read_bytes()
    _, graph = _graph(program)
    values = graph["graph_module"]["graph"]["sym_int_values"]
    first = sorted(values)[0]
    symbol = values[first]["as_expr"]["expr_str"]
    values[first]["as_expr"]["expr_str"] = f"(__import__('os').mkdir({str(marker)!r}), {symbol})[1]"
    _install(cell, _with_graph(program, graph))
    return cell


def test_a_consistent_forged_entry_in_the_remote_is_not_installed(cell: Path, tmp_path: Path) -> None:
    pytest.importorskip(
        "fsspec",
        reason="fsspec is not installed: the remote cache needs the remote extra (pip install 'rbln-build[remote]')",
    )
    from rbln_build.store import RemoteStore

    marker = tmp_path / "payload-ran"
    forged = _forged(cell, marker)
    url = f"file://{tmp_path / 'remote'}"
    key = "a" * 64
    writer = RemoteStore(tmp_path / "attacker" / "cache", url)  # whoever can write the remote
    writer.put("artifacts", key, lambda files: (shutil.copytree(forged, files, dirs_exist_ok=True), {"x": 1})[1])
    assert writer.uploaded == [key]  # its content hash is consistent: the remote holds it
    warnings: list[str] = []
    reader = RemoteStore(tmp_path / "victim" / "cache", url, warn=warnings.append)
    assert reader.lookup("artifacts", key) is None
    assert not reader.entry_path("artifacts", key).exists() and reader.downloaded == []
    [warning] = warnings
    assert f"remote cache entry {url}/artifacts/{key} is corrupt" in warning
    assert "evaluate it as Python code" in warning
    assert not (tmp_path / "remote" / "artifacts" / key).exists()  # removed, so a rebuilt entry can be published
    assert not marker.exists()


def test_a_consistent_forged_entry_in_the_local_cache_fails_full_verification(cell: Path, tmp_path: Path) -> None:
    from rbln_build.store import Store

    marker = tmp_path / "payload-ran"
    forged = _forged(cell, marker)
    warnings: list[str] = []
    store = Store(tmp_path / "cache", warn=warnings.append)
    key = "b" * 64
    store.put("artifacts", key, lambda files: (shutil.copytree(forged, files, dirs_exist_ok=True), {"x": 1})[1])
    assert store.lookup("artifacts", key, full=True) is None
    assert len(warnings) == 1 and "evaluate it as Python code" in warnings[0] and str(store.root) in warnings[0]
    assert not store.entry_path("artifacts", key).exists() and not marker.exists()


def _hostile(cell: Path, name: str, kind: str) -> None:
    """Replace the cell's ``name`` by a FIFO, a link to /dev/zero, or a JSON document nested 100,000 deep."""
    import os

    (cell / name).unlink()
    if kind == "fifo":
        os.mkfifo(cell / name)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", cell / name)
    else:
        (cell / name).write_text("[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize(
    ("name", "kind", "says"),
    [
        pytest.param("rbln-build.json", "fifo", "is not a regular file", id="record-fifo"),
        pytest.param("rbln-build.json", "dev-zero", "is not a regular file", id="record-dev-zero"),
        pytest.param("rbln-build.json", "deep", "nested deeper than 64 levels", id="record-deep"),
        pytest.param("program.pt2", "fifo", "not a regular file", id="program-fifo"),
        pytest.param("program.pt2", "dev-zero", "not a regular file", id="program-dev-zero"),
        pytest.param("config.json", "fifo", "is not a regular file", id="config-fifo"),
        pytest.param("config.json", "deep", "nested deeper than 64 levels", id="config-deep"),
    ],
)
def test_run_reads_a_cells_files_bounded(cell: Path, capsys, name: str, kind: str, says: str) -> None:
    """``run CELL`` on a folder anyone may have written: a FIFO hung, /dev/zero grew without bound
    (MemoryError, exit 3) and a deep record was a RecursionError (exit 3); now each is one line, exit 2,
    naming the file. (A cell of a release is checked against release.json first: test_release.py.)"""
    _hostile(cell, name, kind)
    args = [str(cell), "--prompt-ids", "1,2,3", "--max-new-tokens", "2"]
    if kind == "deep":
        proc = run_here(capsys, *args)
    else:  # in a child with its address space capped and a deadline: a regression fails, never hangs or eats the host
        import resource
        import sys

        def cap() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

        proc = subprocess.run(
            [sys.executable, "-m", "rbln_build.run", *args],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=cap,
        )
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert f"{cell / name}" in line and says in line and "Traceback" not in proc.stderr
