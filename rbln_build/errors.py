"""The exception tree of rbln-build.

Two families, kept apart as doit keeps ``InvalidTask`` apart from ``TaskFailed``::

    RblnBuildError                 base of everything rbln-build raises on purpose
    ├── UserError                  bad input: the user fixes a config, recipe or request
    │   ├── ConfigError            a Hydra config value or key (names the key path)
    │   ├── RecipeError            a recipe file under recipes/ (names the file)
    │   ├── InputError             a file or path the user named cannot be read or is not what it
    │   │                          should be (missing, a folder where a file belongs, a symlink loop,
    │   │                          over its size cap, malformed or too deeply nested JSON/YAML)
    │   └── EstimateError          the estimator rejects the request (ValueError-compatible;
    │                              messages reproduce optimum-rbln 0.12.0's wording exactly)
    └── BuildError                 something failed while building a valid request
        ├── InputFailure           the inputs cannot be built (the compiler says the model does not
        │                          fit, a count the backend cannot hold): stored, not retried
        │                          until an input changes; ``kind`` as in EstimateError
        ├── BackendUnavailable     a compile backend cannot run here (says what to install)
        ├── CacheError             a cache entry is unreadable or fails its hash
        ├── RuntimeLimitError      a generation request needs more KV blocks than the pool has
        └── IntegrityError         an artifact's program does not match its recorded sha256, or holds
                                   content that would run code when loaded: refused before loading

Every message says what failed, where (config key or file), what it got, and what to do next.
The CLI prints ``str(error)`` without a traceback for any ``RblnBuildError``, on one line, then its
``detail`` when it has one.
"""

from __future__ import annotations

__all__ = [
    "RblnBuildError",
    "UserError",
    "ConfigError",
    "RecipeError",
    "InputError",
    "EstimateError",
    "BuildError",
    "InputFailure",
    "BackendUnavailable",
    "CacheError",
    "RuntimeLimitError",
    "IntegrityError",
]


class RblnBuildError(Exception):
    """Base of every error rbln-build raises on purpose.

    ``detail``: optional text rbln-build rendered itself (an infeasible deployment's plan: its tables,
    conflicts and the override lines of each change), printed as it is under the message's one line.
    The message alone must still say what failed and what to do (a caller may drop the detail)."""

    detail: str | None = None


class UserError(RblnBuildError):
    """Bad input; the user fixes it."""


class ConfigError(UserError):
    """A config value or key is wrong. The message names the key path."""


class RecipeError(UserError):
    """A recipe under recipes/ is missing or malformed. The message names the file."""


class InputError(UserError):
    """A document or path the user gave cannot be used. The message names the file and what to do."""


class EstimateError(UserError, ValueError):
    """The estimator rejects a request.

    ``kind`` is a stable machine-readable tag (for example ``"insufficient_memory"``,
    ``"budget_exceeds_dram"``, ``"budget_and_blocks_exclusive"``, ``"invalid_budget"``,
    ``"invalid_attention"``, ``"unknown_npu"``, ``"invalid_request"``, ``"invalid_report"`` (the report does
    not match the request), ``"blocks_below_floor"`` (an explicit count below the flash-attention floor)).
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class BuildError(RblnBuildError):
    """A valid request failed while building."""


class InputFailure(BuildError):
    """A valid request whose inputs cannot be built; the same inputs would fail the same way.

    The build stores it with the cell (or compile key) and does not retry it until an input changes,
    so a cell can declare it in ``matrix.expect_failure`` by its ``kind``.
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class BackendUnavailable(BuildError):
    """A compile backend cannot run on this machine."""


class CacheError(BuildError):
    """A cache entry is unreadable or does not match its recorded hash."""


class RuntimeLimitError(BuildError):
    """A generation request needs more KV-cache blocks than the artifact's pool holds."""


class IntegrityError(BuildError):
    """An artifact fails its integrity check (a program's sha256, or content that would run code when
    loaded); nothing was loaded."""
