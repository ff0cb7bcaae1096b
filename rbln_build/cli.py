"""``rbln-build`` and ``python -m rbln_build.cli``: the command line (rbln_build.commands)."""

from .commands import entry, main

__all__ = ["entry", "main"]

if __name__ == "__main__":
    entry()
