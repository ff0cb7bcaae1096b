"""Ship the repository's conf/ and recipes/ inside the wheel as rbln_build/_data/{conf,recipes}.

They stay at the repository root, where a clone's user edits them; ``rbln_build.memory._shipped`` finds
the packaged copy in an installed wheel and the root folders in a clone or an editable install.
Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = ("conf", "recipes")


class build_py_with_data(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the repository's own folders
        for name in SHIPPED:
            dst = Path(self.build_lib) / "rbln_build" / "_data" / name
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(ROOT / name, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))


setup(cmdclass={"build_py": build_py_with_data})
