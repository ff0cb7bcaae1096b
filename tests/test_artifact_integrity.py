"""Artifacts are code: nothing is loaded before it is verified (docs/security.md, "Artifacts are code").

* a program whose bytes changed is refused (exit 2), never run to produce other tokens;
* a program archive holding anything torch.export.load would unpickle is refused before a byte of it
  is unpickled (the payload below creates a marker file when unpickled; the marker never appears);
* ``run --manifest`` checks the whole cell against the manifest's content hash, so a rewritten
  rbln-build.json that matches a rewritten program is caught too.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("torch")

from _torch_cells import finalized, own_copy, run_here  # noqa: E402

from rbln_build.backends.torch._archive import check_program_archive  # noqa: E402
from rbln_build.errors import IntegrityError  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m rbln_build.run`` as a user runs it (a subprocess)."""
    return subprocess.run(
        [sys.executable, "-m", "rbln_build.run", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )


@pytest.fixture
def cell(tmp_path: Path) -> Path:
    return own_copy("tiny_llama", 5, tmp_path / "cell")


def _rerecord(cell: Path) -> None:
    """What an attacker who can write the folder does: record the new program's digest too."""
    record = json.loads((cell / "rbln-build.json").read_text())
    record["programs"]["program.pt2"] = hashlib.sha256((cell / "program.pt2").read_bytes()).hexdigest()
    (cell / "rbln-build.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


class _Payload:
    """Unpickling this creates the folder ``marker`` (``os.mkdir``): proof that pickle code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.mkdir, (str(self.marker),))


def _with_entry(program: bytes, name: str, data: bytes) -> bytes:
    """The archive with entry ``<root>/name`` replaced by (or added as) ``data``."""
    src = zipfile.ZipFile(io.BytesIO(program))
    root = src.namelist()[0].split("/", 1)[0]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            if info.filename != f"{root}/{name}":
                dst.writestr(info, src.read(info.filename))
        dst.writestr(f"{root}/{name}", data)
    return out.getvalue()


def test_flipped_program_bytes_exit_2_and_print_no_tokens(cell: Path) -> None:
    ok = run(str(cell), "--prompt-ids", "1,2,3", "--max-new-tokens", "2")
    assert ok.returncode == 0 and ok.stdout.startswith("prompt 0: "), ok.stderr
    data = bytearray((cell / "program.pt2").read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit inside a weight: the program would still load and run
    (cell / "program.pt2").write_bytes(bytes(data))
    bad = run(str(cell), "--prompt-ids", "1,2,3", "--max-new-tokens", "2")
    assert bad.returncode == 2 and bad.stdout == ""
    assert "program.pt2: sha256" in bad.stderr and "recorded in rbln-build.json" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("where", ["sample_inputs", "pickled_weight"])
def test_a_pickle_payload_in_the_program_is_refused_before_anything_is_unpickled(
    cell: Path, tmp_path: Path, where: str, capsys
) -> None:
    import torch

    marker = tmp_path / "payload-ran"
    payload = pickle.dumps(_Payload(marker), protocol=2)
    program = (cell / "program.pt2").read_bytes()
    if where == "sample_inputs":  # torch falls back to weights_only=False when weights_only=True fails
        crafted = _with_entry(program, "data/sample_inputs/model.pt", payload)
    else:  # a weight "saved with pickle": torch.load(weights_only=False)
        root = zipfile.ZipFile(io.BytesIO(program)).namelist()[0].split("/", 1)[0]
        config = json.loads(zipfile.ZipFile(io.BytesIO(program)).read(f"{root}/data/weights/model_weights_config.json"))
        first = sorted(config["config"])[0]
        config["config"][first]["use_pickle"] = True
        crafted = _with_entry(
            _with_entry(program, "data/weights/model_weights_config.json", json.dumps(config).encode()),
            f"data/weights/{config['config'][first]['path_name']}",
            payload,
        )
    # The payload is live: torch.export.load on these bytes runs it.
    with contextlib.suppress(Exception):  # torch fails after the payload ran; how is not the point
        torch.export.load(io.BytesIO(crafted))
    assert marker.is_dir()
    marker.rmdir()
    (cell / "program.pt2").write_bytes(crafted)
    _rerecord(cell)  # the digest matches: only the archive check stands between the payload and pickle
    proc = run_here(capsys, str(cell), "--prompt-ids", "1,2,3", "--max-new-tokens", "2")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert "would unpickle or load code from it" in proc.stderr
    assert not marker.exists()


def test_run_with_the_manifest_catches_a_rewritten_record(cell: Path, tmp_path: Path, capsys) -> None:
    from rbln_build.store._store import Store

    build = tmp_path / "build"
    entry = Store(build / "cache").put(
        "artifacts", "a" * 64, lambda files: (shutil.copytree(cell, files, dirs_exist_ok=True), {"x": 1})[1]
    )
    (build / "artifacts").mkdir()
    os.symlink(f"../cache/artifacts/{entry.key}/files", build / "artifacts" / "c1")
    (build / "manifest.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "cells": {
                    "c1": {"status": "ok", "artifact": {"path": "artifacts/c1", "content_hash": entry.content_hash}}
                },
            }
        )
    )
    ok = run_here(
        capsys, "--manifest", str(build / "manifest.json"), "c1", "--prompt-ids", "1,2,3", "--max-new-tokens", "2"
    )
    assert ok.returncode == 0 and ok.stdout.startswith("prompt 0: "), ok.stderr
    files = entry.files
    data = bytearray((files / "program.pt2").read_bytes())
    data[len(data) // 2] ^= 0x01
    (files / "program.pt2").write_bytes(bytes(data))
    _rerecord(files)
    # the record alone is fooled (the digest was rewritten with the program) ...
    assert run_here(capsys, str(files), "--prompt-ids", "1,2,3", "--max-new-tokens", "2").returncode == 0
    # ... the manifest is not
    bad = run_here(
        capsys, "--manifest", str(build / "manifest.json"), "c1", "--prompt-ids", "1,2,3", "--max-new-tokens", "2"
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert "does not match" in bad.stderr and "recorded for cell 'c1'" in bad.stderr


def test_run_with_the_manifest_names_an_unknown_cell(tmp_path: Path, capsys) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"schema_version": 1, "cells": {"a": {"artifact": None}}}))
    proc = run_here(capsys, "--manifest", str(tmp_path / "manifest.json"), "b", "--prompt-ids", "1")
    assert proc.returncode == 2 and "no cell 'b'" in proc.stderr


@pytest.mark.parametrize(
    "name, data, message",
    [
        pytest.param("data/aotinductor/model/x.so", b"\x7fELF", "unexpected archive entry", id="aoti-library"),
        pytest.param("data/constants/custom_obj_0", b"x", "unexpected archive entry", id="custom-object"),
        pytest.param("extra/notes.txt", b"x", "unexpected archive entry", id="extra-file"),
        pytest.param("data/weights/model.pt", b"x", "unexpected archive entry", id="legacy-weights"),
        pytest.param("data/sample_inputs/model.pt", b"\x80\x02}q\x00.", "pickled sample inputs", id="sample-inputs"),
    ],
)
def test_the_archive_allowlist(name: str, data: bytes, message: str) -> None:
    program = (finalized("tiny_llama", 5) / "program.pt2").read_bytes()
    check_program_archive(program, Path("program.pt2"))  # what we write passes
    with pytest.raises(IntegrityError, match=message):
        check_program_archive(_with_entry(program, name, data), Path("program.pt2"))


def test_the_archive_check_refuses_duplicate_entries() -> None:
    program = (finalized("tiny_llama", 5) / "program.pt2").read_bytes()
    root = zipfile.ZipFile(io.BytesIO(program)).namelist()[0].split("/", 1)[0]
    out = io.BytesIO(program)
    with zipfile.ZipFile(out, "a") as z, pytest.warns(UserWarning, match="Duplicate name"):
        z.writestr(f"{root}/models/model.json", b"{}")
    with pytest.raises(IntegrityError, match="names one entry twice"):
        check_program_archive(out.getvalue(), Path("program.pt2"))
