"""``rbln-build`` and ``python -m rbln_build.cli``: the command line (rbln_build.commands)."""

from .commands import main

if __name__ == "__main__":
    main()
