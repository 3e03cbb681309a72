"""Build step of the wheel (everything else is in pyproject.toml): the repository keeps `configs/` and
`model_cards/` at its top; the wheel carries them inside the package as `ssa_hf/package_data/<name>/`, where
`ssa_hf.resources.shipped_folder` finds them. An editable install reads the checkout's folders instead."""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED_FOLDERS = ("configs", "model_cards")  # = ssa_hf.resources.SHIPPED_FOLDERS (tested)


class BuildPyWithData(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        here = os.path.dirname(os.path.abspath(__file__))
        for name in SHIPPED_FOLDERS:
            target = os.path.join(self.build_lib, "ssa_hf", "package_data", name)
            shutil.rmtree(target, ignore_errors=True)
            # plain files only: nothing the wheel carries is a link
            shutil.copytree(os.path.join(here, name), target, symlinks=False,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithData})
