"""``executor=ray``: each compile key is a Ray task (``pip install 'rbln-build[ray]'``).

A task compiles into a private Store in the worker's temporary folder (with the remote cache as its
second level, when one is configured, so the compile is looked up there first and uploaded after).
With a remote cache the task returns only the key's content hash, and the driver downloads the
entry from the remote and verifies it; without one (or when the worker's upload did not land) it
returns the entry packed as a tar through Ray's object store. The driver verifies it (sha256 of
the tar, then the entry's content hash) and installs it in the build directory's Store; the cells
and the manifest are the driver's, exactly as in a local build. Nothing of a task is visible until
the driver installs the whole entry, so a worker killed mid-compile leaves nothing in the build:
Ray runs the task again (``executor.max_retries``), and a task that fails for good becomes the
failure of its compile key's cells, with the other cells unaffected.

Resources per task: ``num_cpus`` 1, plus what the backend needs: the ``rbln`` backend asks for the
custom resource ``rbln_sdk`` that only hosts with the Rebellions SDK advertise (``ray start
--resources='{"rbln_sdk": 1}'``). A plug-in backend class may declare ``ray_resources``.
``executor.num_cpus`` and ``executor.resources`` override them.
"""

from __future__ import annotations

import queue
import shutil
import time
from concurrent.futures import Future
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..store import CompileOutcome, Store
from ._cluster import (
    Credentials,
    auth_hint,
    carried,
    prepare_auth,
    private_token,
    restore,
    scratch_folder,
    sweep,
    sweep_every_node,
)
from ._jobs import CompileDone, StoreRef, _where, compile_job
from ._task_inputs import InputPacker, TaskInputs, driver_text, materialize, plugin_loaded

if TYPE_CHECKING:
    from ..backends import CompileSpec
    from ..config import Scale

__all__ = ["RayCompiler", "resources_for", "BACKEND_RESOURCES", "EXTRA_HINT"]

EXTRA_HINT = "pip install 'rbln-build[ray]'"
BACKEND_RESOURCES: dict[str, dict[str, float]] = {"rbln": {"rbln_sdk": 1.0}}


def resources_for(backend: str, scale: Scale) -> dict[str, Any]:
    """Ray options for one compile of ``backend``: num_cpus and custom resources."""
    from ..backends import get_backend

    declared = dict(BACKEND_RESOURCES.get(backend, {}))
    declared.update(getattr(type(get_backend(backend)), "ray_resources", {}) or {})
    num_cpus = float(declared.pop("num_cpus", 1.0))
    if scale.num_cpus is not None:
        num_cpus = scale.num_cpus
    declared.update(dict(scale.resources))
    return {"num_cpus": num_cpus, "resources": declared}


def _compile_task(
    key: str,
    spec: CompileSpec,
    backend: str,
    remote: str | None,
    require: bool,
    options: Any,
    inputs: TaskInputs,
    credentials: Credentials | None = None,
) -> tuple[CompileDone, bytes | None, str | None]:
    """Runs on a Ray worker: (what happened, the entry packed as a tar, its content hash). It reads
    its inputs from ``inputs`` (``_task_inputs``), never from the driver's paths, and the remote
    cache's credentials from ``credentials`` (``_cluster._credentials``), or its node's environment."""
    sweep()  # scratch folders of tasks stopped hard on this node (``_cluster._scratch``)
    if credentials is None:
        return _compile_in_scratch(key, spec, backend, remote, require, options, inputs)
    with credentials.applied():
        return _compile_in_scratch(key, spec, backend, remote, require, options, inputs)


def _compile_in_scratch(
    key: str,
    spec: CompileSpec,
    backend: str,
    remote: str | None,
    require: bool,
    options: Any,
    inputs: TaskInputs,
) -> tuple[CompileDone, bytes | None, str | None]:
    from ..store import pack_entry

    work = scratch_folder()
    try:
        ref = StoreRef(str(work / "cache"), remote, require, options=options)
        why = None if remote is None else _cannot_use(ref)
        if why is not None:  # before any work: a compile (or a weights download) would be lost
            error = (
                f"the Ray worker {_where()} cannot use cache.remote {remote} ({why}); give the nodes the cache's "
                "credentials and endpoint (cache.key_env/secret_env/endpoint, or their own environment)"
            )
            return (
                CompileDone(key, None, False, 0.0, _where(), error, "build_failed", True, attempt=_attempt()),
                None,
                None,
            )
        try:
            with plugin_loaded(inputs.plugin, work):
                local = materialize(inputs, spec, work / "inputs", ref.open(lambda _msg: None))
                done = compile_job(ref, key, local, backend)
        except Exception as exc:  # the inputs could not be fetched or fail their digests
            from ._stages import describe

            message, kind, retry = describe(exc)
            done = CompileDone(key, None, False, 0.0, _where(), message, kind, retry)
        done = replace(done, attempt=_attempt())
        if done.error is not None:
            text = driver_text(done.error, work / "inputs", inputs)
            return replace(done, error=text), None, None
        unwritten = [w for w in done.warnings if w.startswith("cache.remote: ") and " cannot be reached (" in w]
        if remote is not None and (options is None or options.writes) and unwritten:
            # the driver reached the remote (else it would not have named it): this node cannot, so its
            # entry would be local to a temporary folder; an error of this task, never a silent miss
            why = unwritten[0].split(" cannot be reached ", 1)[1].split("; building", 1)[0]
            error = (
                f"the Ray worker {done.where} cannot reach cache.remote {why}; give the nodes the cache's "
                "credentials and endpoint (cache.key_env/secret_env/endpoint, or their own environment)"
            )
            return (
                replace(done, produced=None, fresh=False, error=error, error_kind="build_failed", retry=True),
                None,
                None,
            )
        store = ref.open(lambda _msg: None)
        entry = store.lookup("compile", key)
        assert entry is not None
        if remote is not None and _published(store, key):
            return done, None, entry.content_hash  # in the remote: the driver fetches and verifies it there
        return done, pack_entry(entry, work / "entry.tar"), entry.content_hash
    finally:
        shutil.rmtree(work, ignore_errors=True)


_REACHED: set[tuple[str, Any]] = set()  # (url, options) this worker process has reached


def _cannot_use(ref: StoreRef) -> str | None:
    """Why this worker cannot read (and in readwrite mode write) the remote cache, checked before any
    work (``RemoteStore.check``: a listing and a conditional write to ``tmp/``, milliseconds); None
    when it can. A success is remembered for the worker process's later tasks."""
    mark = (str(ref.remote), ref.options)
    if mark in _REACHED:
        return None
    try:
        why = ref.open(lambda _msg: None).check()  # type: ignore[attr-defined]
    except Exception as exc:  # a credential variable not set here (CacheError), a missing package
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if why is None:
        _REACHED.add(mark)
    return why  # type: ignore[no-any-return]


def _attempt() -> int:
    """Which run of this Ray task this is (0: the first; Ray runs it again when its worker died)."""
    try:
        import ray

        worker: Any = ray._private.worker.global_worker
        return int(worker.core_worker.get_current_task_attempt_number())
    except Exception:
        return 0  # another Ray: retries are then not shown


def _published(store: Any, key: str) -> bool:
    """Is ``key``'s compile entry on the remote cache (this worker uploaded it, or found it there)?"""
    try:
        fs, base = store._filesystem()
        return bool(store._call(fs.exists, f"{base}/compile/{key}"))
    except Exception:
        return False  # then the entry travels back through Ray's object store


class RayCompiler:
    """Submits compile keys as Ray tasks; their futures land the entries in the driver's Store."""

    def __init__(self, ref: StoreRef, scale: Scale) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError(f"executor=ray: Ray is not installed; install it with: {EXTRA_HINT}") from None
        self.ray = ray
        self.ref = ref
        self.scale = scale
        self.owns_cluster = False  # this build started the cluster (and stops it); not `started`: the scheduler asks LocalPool.started()
        self._temp_dir: str | None = None  # a short folder of ours for a private cluster (_ray_setup)
        self._token: dict[str, str | None] = {}  # what private_token set, to restore
        if not ray.is_initialized():
            from ._ray_setup import remove_temp_dir, short_temp_dir

            address = None if scale.address == "local" else scale.address
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
            if address is None:
                kwargs["address"] = "local"
                self._token = private_token()  # never ~/.ray/auth_token (_cluster._auth)
                self._temp_dir = short_temp_dir()
                if self._temp_dir is not None:
                    kwargs["_temp_dir"] = self._temp_dir
            else:
                kwargs["address"] = address
                prepare_auth(address, scale.auth_token_env)  # from the cluster, never a stray token file
            try:
                ray.init(**kwargs)
            except (ConnectionError, ValueError, RuntimeError, ray.exceptions.RayError) as exc:
                remove_temp_dir(self._temp_dir)
                restore(self._token)
                why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise ConfigError(
                    f"executor.address: cannot reach the Ray cluster at {scale.address!r} ({why}); start one with "
                    f"`ray start --head`, or use executor.address=local for a cluster on this machine; {auth_hint()}."
                ) from None
            self.owns_cluster = True
        nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
        cpus = sum(n.get("Resources", {}).get("CPU", 0) for n in nodes)
        self.description = f"Ray ({len(nodes)} node(s), {cpus:g} CPU(s))"
        self._task = ray.remote(_compile_task)
        self._refs: list[Any] = []
        self._arrived: queue.SimpleQueue[tuple[str, Future[Any], Future[CompileDone]]] = queue.SimpleQueue()
        self.inputs = InputPacker(ref, ray)

    def submit_compile(self, key: str, spec: CompileSpec, backend: str) -> Future[CompileDone]:
        landed: Future[CompileDone] = Future()
        try:
            inputs = self.inputs.pack(spec, backend)
        except Exception as exc:  # a recipe file or the checkpoint is unreadable now: this key's failure
            from ._stages import describe

            message, kind, retry = describe(exc)
            landed.set_result(CompileDone(key, None, False, 0.0, _where(), message, kind, retry))
            return landed
        options = resources_for(backend, self.scale)
        named = self.ref.options.env_names() if self.ref.options is not None and self.ref.remote else ()
        ref = self._task.options(  # never a runtime_env with credentials: Ray logs it (_cluster._credentials)
            max_retries=self.scale.max_retries,
            retry_exceptions=False,
            name=f"rbln-build compile {spec.recipe.name} {spec.npu.family} {key[:12]}",
            **options,
        ).remote(key, spec, backend, self.ref.remote, self.ref.require_remote, self.ref.options, inputs, carried(named))
        self._refs.append(ref)
        # on Ray's thread: only a queue (``land`` works in the scheduler's thread; work here held Ray's
        # thread, and ``landed``'s lock may be held by a ``wait`` that Ctrl-C interrupted)
        ref.future().add_done_callback(lambda f: self._arrived.put((key, f, landed)))
        return landed

    def land(self) -> None:
        """In the scheduler's thread, between its waits: land the tasks Ray reported done."""
        while not self._arrived.empty():  # this thread alone takes from it
            self._land(*self._arrived.get_nowait())

    def _land(self, key: str, fut: Future[Any], landed: Future[CompileDone]) -> None:
        try:
            done, packed, recorded = fut.result()
            if packed is not None:
                from ..store import install_packed

                store = self.ref.open(lambda _msg: None)
                local = Store.lookup(store, "compile", key)  # this level only: the bytes are here
                if local is None and not install_packed(store, "compile", key, packed, recorded):
                    done = replace(
                        done,
                        produced=None,
                        fresh=False,
                        error="the entry a Ray worker sent back fails its content hash; the next run retries it",
                        error_kind="build_failed",
                        retry=True,
                    )
            elif done.error is None and recorded is not None:  # the worker published it to cache.remote
                store = self.ref.open(lambda _msg: None)
                entry = store.lookup("compile", key)  # downloaded and verified (sha256 and content hash)
                if entry is None or entry.content_hash != recorded:
                    done = replace(
                        done,
                        produced=None,
                        fresh=False,
                        error=(
                            "the entry a Ray worker published to cache.remote cannot be fetched or fails its "
                            "content hash here; the next run retries it"
                        ),
                        error_kind="build_failed",
                        retry=True,
                    )
            elif done.error is not None:
                outcome = CompileOutcome(key, done.error, done.error_kind or "build_failed", done.retry)
                self.ref.open(lambda _msg: None).save_record("failures", key, outcome.to_json())
            landed.set_result(done)
        except BaseException as exc:  # the task failed for good (retries used up), or cancelled
            landed.set_exception(exc)

    def close(self, cancel: bool) -> None:
        if cancel:
            self._cancel()
        if self.owns_cluster:
            self.ray.shutdown()
            from ._ray_setup import remove_temp_dir

            remove_temp_dir(self._temp_dir)
            restore(self._token)
            sweep()  # the private cluster's workers ran here: scratch folders of those stopped hard

    def _cancel(self, grace_s: float = 2.0) -> None:
        """Cancel the tasks still running: gently first (a KeyboardInterrupt in the task, whose
        ``finally`` removes its scratch folder), then, after ``grace_s``, by killing the workers."""
        pending = list(self._refs)
        for ref in pending:  # a finished task's cancel is a no-op
            try:
                self.ray.cancel(ref)
            except Exception:
                pass  # finished already
        deadline = time.monotonic() + grace_s
        while pending and time.monotonic() < deadline:
            _ready, pending = self.ray.wait(pending, num_returns=len(pending), timeout=0.2, fetch_local=False)
        for ref in pending:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:
                pass  # finished already
        if pending:  # killed workers leave their scratch folders: remove them on every node now
            sweep_every_node(self.ray)
