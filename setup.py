"""Build hook: the wheel carries ``configs/`` as ``evolve_train/configs`` (``evolve_train.compose.packaged_configs``),
so ``evolve-train`` composes the shipped configs from any directory. Everything else is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithConfigs(build_py):
    def run(self):
        super().run()
        source = Path(__file__).resolve().parent / "configs"
        if source.is_dir():
            shutil.copytree(source, Path(self.build_lib) / "evolve_train" / "configs", dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithConfigs})
