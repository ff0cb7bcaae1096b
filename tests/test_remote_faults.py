"""The remote cache under faults, on moto's S3 server on 127.0.0.1 through the real s3fs: errors by
kind (a transient 5xx is retried per key and the entry published; a lasting refusal turns the remote
off for the run; a publish that fails every retry leaves nothing in ``tmp/``), and a Ray worker that
cannot use the remote fails its key before any work (wrong credentials against a moto server that
checks them). The faults are answered by a tiny proxy on 127.0.0.1 (tests/plugins/s3_proxy.py); every
other request reaches moto unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from s3_proxy import S3Proxy
from test_remote import _free_port, s3  # noqa: F401  (moto's S3 server with a bucket)

from rbln_build.store import RemoteOptions, RemoteStore

pytest.importorskip("s3fs", reason="s3fs is not installed: pip install 'rbln-build[remote]'")
KEY = "ab" * 32


def _fill(files: Path) -> dict[str, object]:
    (files / "a.bin").write_bytes(b"\x07" * 4096)
    return {"produced": "plan"}


@pytest.fixture
def proxied(s3: tuple[dict[str, str], Any, Any]) -> Iterator[tuple[S3Proxy, Any]]:  # noqa: F811
    env, fs, _ = s3
    proxy = S3Proxy(int(env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1]))
    try:
        yield proxy, fs
    finally:
        proxy.close()


def _left(fs: Any, prefix: str) -> list[str]:
    """What is in ``tmp/`` under ``prefix`` (an empty folder does not exist on S3)."""
    fs.invalidate_cache()
    return list(fs.find(f"rbln-cache/{prefix}/tmp"))


def _store(tmp_path: Path, proxy: S3Proxy, prefix: str) -> tuple[RemoteStore, list[str]]:
    warnings: list[str] = []
    options = RemoteOptions(endpoint=proxy.url, connect_timeout=2, read_timeout=5)
    return RemoteStore(tmp_path / "cache", f"s3://rbln-cache/{prefix}", warnings.append, options=options), warnings


def test_one_injected_5xx_on_a_put_is_retried_and_the_key_published(
    tmp_path: Path, proxied: tuple[S3Proxy, Any]
) -> None:
    proxy, fs = proxied
    store, warnings = _store(tmp_path, proxy, "five")
    assert store.probe() and _left(fs, "five") == []  # the probe's own write is gone
    proxy.fail("PUT", "/five/compile/", 500, "InternalError", times=1)
    store.put("compile", KEY, _fill)
    puts = [p for m, p in proxy.requests if m == "PUT" and "/five/compile/" in p]
    assert len(puts) == 2  # the injected 500, then the retry
    assert store.uploaded == [KEY] and not store.down and not warnings
    fs.invalidate_cache()
    pointer = json.loads(fs.cat_file(f"rbln-cache/five/compile/{KEY}"))
    assert fs.exists(f"rbln-cache/five/blobs/{pointer['blob']}")
    assert _left(fs, "five") == []
    # a second build dir takes it from the remote
    other = RemoteStore(tmp_path / "other", "s3://rbln-cache/five", options=RemoteOptions(endpoint=proxy.url))
    assert other.lookup("compile", KEY) is not None and other.downloaded == [KEY]


def test_a_reset_connection_on_a_put_is_retried_and_the_key_published(
    tmp_path: Path, proxied: tuple[S3Proxy, Any]
) -> None:
    proxy, fs = proxied
    store, warnings = _store(tmp_path, proxy, "reset")
    assert store.probe()
    proxy.fail("PUT", "/reset/compile/", 0, times=1)
    store.put("compile", KEY, _fill)
    assert len([p for m, p in proxy.requests if m == "PUT" and "/reset/compile/" in p]) >= 2
    assert store.uploaded == [KEY] and not store.down and not warnings
    assert _left(fs, "reset") == []


def test_a_lasting_refusal_turns_the_remote_off_once(tmp_path: Path, proxied: tuple[S3Proxy, Any]) -> None:
    proxy, fs = proxied
    store, warnings = _store(tmp_path, proxy, "denied")
    assert store.probe()
    proxy.fail("PUT", "/denied/compile/", 403, "AccessDenied", times=100)
    store.put("compile", KEY, _fill)
    assert store.down and store.uploaded == []
    assert len([p for m, p in proxy.requests if m == "PUT" and "/denied/compile/" in p]) == 1  # not retried
    assert len(warnings) == 1 and "cannot be reached (PermissionError" in warnings[0]
    assert _left(fs, "denied") == []


def test_a_publish_failing_every_retry_leaves_no_temporary_and_the_remote_stays_on(
    tmp_path: Path, proxied: tuple[S3Proxy, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rbln_build.store import _remote_io

    monkeypatch.setattr(_remote_io, "BACKOFF_S", (0.01, 0.01, 0.01))  # the same 4 attempts, without the waits
    proxy, fs = proxied
    store, warnings = _store(tmp_path, proxy, "flaky")
    assert store.probe()
    proxy.fail("PUT", "/flaky/blobs/", 503, "ServiceUnavailable", times=100)  # the copy out of tmp/
    store.put("compile", KEY, _fill)
    assert store.failed == [f"compile/{KEY}"] and not store.down
    assert len(warnings) == 1 and "failed 4 times" in warnings[0] and "next run uploads it" in warnings[0]
    assert _left(fs, "flaky") == [] and not fs.exists(f"rbln-cache/flaky/compile/{KEY}")
    proxy.reset_counts()
    store.put("compile", "cd" * 32, _fill)  # the server well again: the remote served on
    assert "cd" * 32 in store.uploaded and not store.down


def test_a_remote_that_refuses_deletes_passes_the_check_and_serves(
    tmp_path: Path, proxied: tuple[S3Proxy, Any]
) -> None:
    """Write-once buckets (PutObject allowed, DeleteObject not) are a common CI policy."""
    proxy, fs = proxied
    store, warnings = _store(tmp_path, proxy, "nodelete")
    proxy.fail("DELETE", "/nodelete/", 403, "AccessDenied", times=100)
    proxy.fail("POST", "?delete", 403, "AccessDenied", times=100)
    assert store.probe() and not warnings
    store.put("compile", KEY, _fill)
    assert store.uploaded == [KEY] and not store.down


def test_a_stale_temporary_is_removed_by_the_next_writer(tmp_path: Path, proxied: tuple[S3Proxy, Any]) -> None:
    from rbln_build.store._remote_io import clean_stale

    proxy, fs = proxied
    fs.pipe_file("rbln-cache/stale/tmp/left-by-a-killed-upload", b"x")
    store, _ = _store(tmp_path, proxy, "stale")
    assert store.probe()
    fs.invalidate_cache()
    assert fs.exists("rbln-cache/stale/tmp/left-by-a-killed-upload")  # young: an upload in progress keeps it
    assert clean_stale(fs, "rbln-cache/stale/tmp", -1) == 1  # the probe's rule, with an age every file passes
    assert _left(fs, "stale") == []


# -- a worker without access to the remote ---------------------------------------------------------


@pytest.fixture
def auth_moto(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """moto's S3 server in its own process with authentication on: (endpoint, valid credentials)."""
    pytest.importorskip("moto.server", reason="moto is not installed: pip install 'rbln-build[scale-test]'")
    import boto3

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
                break
            except Exception:
                time.sleep(0.1)
        kw: dict[str, Any] = {
            "endpoint_url": endpoint,
            "region_name": "us-east-1",
            "aws_access_key_id": "setup",
            "aws_secret_access_key": "setup",
        }
        iam = boto3.client("iam", **kw)
        iam.create_user(UserName="ci")
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="ci", PolicyName="all", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="ci")["AccessKey"]
        boto3.client("s3", **kw).create_bucket(Bucket="rbln-cache")
        urllib.request.urlopen(
            urllib.request.Request(
                f"{endpoint}/moto-api/reset-auth", data=b"0", method="POST", headers={"Content-Type": "text/plain"}
            )
        )
        yield endpoint, {"GOOD_KEY": key["AccessKeyId"], "GOOD_SECRET": key["SecretAccessKey"]}
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_worker_without_access_fails_its_checkpoint_key_in_milliseconds_without_compiling(
    tmp_path: Path, auth_moto: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_task_inputs import _project, _spec

    from rbln_build.execution import StoreRef, _jobs, _ray
    from rbln_build.execution._task_inputs import InputPacker

    endpoint, good = auth_moto
    for name, value in good.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("BAD_KEY", "AKIAWRONGWRONGWRONG0")
    monkeypatch.setenv("BAD_SECRET", "wrong")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    url = "s3://rbln-cache/team"
    good_options = RemoteOptions(endpoint=endpoint, key_env="GOOD_KEY", secret_env="GOOD_SECRET")
    spec = _spec(_project(tmp_path / "driver"))
    inputs = InputPacker(StoreRef(str(tmp_path / "driver-cache"), url, options=good_options), ray=None).pack(
        spec, "torch"
    )
    assert inputs.weights and all(w.ref is None for w in inputs.weights)  # the checkpoint is on the remote
    compiled: list[str] = []
    monkeypatch.setattr(_jobs, "compile_once", lambda *a, **k: compiled.append(a[1]))  # must not be reached

    bad_options = RemoteOptions(endpoint=endpoint, key_env="BAD_KEY", secret_env="BAD_SECRET")
    started = time.perf_counter()
    done, packed, recorded = _ray._compile_task("ef" * 32, spec, "torch", url, False, bad_options, inputs)
    took = time.perf_counter() - started
    assert took < 5.0 and compiled == [] and packed is None and recorded is None
    assert done.error is not None and done.retry and done.error_kind == "build_failed"
    assert "cannot use cache.remote s3://rbln-cache/team (PermissionError" in done.error
    assert "cache.key_env/secret_env/endpoint" in done.error and "wrong" not in done.error
    assert "NoCredentialsError" not in done.error

    monkeypatch.delenv("BAD_KEY")  # a variable the config names, not set on this node
    done, _, _ = _ray._compile_task("ef" * 32, spec, "torch", url, False, bad_options, inputs)
    assert "BAD_KEY" in (done.error or "") and compiled == []

    # the same worker with the cluster's credentials passes the check (the server checks them)
    assert _ray._cannot_use(StoreRef(str(tmp_path / "w"), url, options=good_options)) is None
