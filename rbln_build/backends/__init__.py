"""Compile backends behind one small interface (see ``base``). Importing this package is cheap:
a backend module (and torch) is imported only when ``get_backend`` is called for it."""

from __future__ import annotations

from .base import Backend, CompileResult, CompileSpec, get_backend, BACKENDS

__all__ = ["Backend", "CompileResult", "CompileSpec", "get_backend", "BACKENDS"]
