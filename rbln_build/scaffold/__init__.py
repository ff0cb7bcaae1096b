"""The commands that write a project for the user to edit: ``init`` and ``recipe add``.

_init     ``rbln-build init DIR``: a new project (rbln-build.yaml, conf/, recipes/, .gitignore)
_recipe   ``rbln-build recipe add NAME --from DIR``: a recipe from a local checkpoint, checked as a
          build checks it

The public names are the commands' entry points, ``f(argv) -> exit status``
(``rbln_build.commands`` dispatches to them and is the one error boundary); each imports its module
when called.
"""

from __future__ import annotations

__all__ = ["init_main", "recipe_main"]


def init_main(argv: list[str]) -> int:
    """``rbln-build init [DIR]``."""
    from ._init import main

    return main(argv)


def recipe_main(argv: list[str]) -> int:
    """``rbln-build recipe add NAME --from DIR``."""
    from ._recipe import main

    return main(argv)
