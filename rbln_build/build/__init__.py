"""Builds: configs -> cells -> compile -> resolve -> finalize -> manifest.

_config      typed Hydra schemas and their conversion to frozen settings
_matrix      settings -> cells (stable order, stable ids)
_keys        compile keys and cell keys (content hashes of every input)
_store       the content-addressed cache (verified on read, atomic writes)
_tasks       the doit wiring
_executors   stages in worker processes (jobs=N), scheduled ahead of doit; _ray: Ray tasks
_remote      the remote cache behind the Store (cache.remote, fsspec)
_scale       the jobs / executor / cache config keys;  _sweep: Hydra launchers' sweep jobs
_manifest    manifest.json and summary.json
cli          ``rbln-build``
"""
