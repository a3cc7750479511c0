"""Bundles libvoicecat.so into the wheel when VOICECAT_BUNDLE_LIBRARY names it.

`make wheel` sets it to a stripped build of the library; the wheel then carries
voicecat/_bundled/libvoicecat.so.0 and is tagged for this platform (py3-none-linux_*),
since it holds machine code. Without it the wheel is pure Python and finds the library
through VOICECAT_LIBRARY, pkg-config or the system. Everything else is in pyproject.toml.
"""
import os
import shutil

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

BUNDLE = os.environ.get("VOICECAT_BUNDLE_LIBRARY")
if BUNDLE and not os.path.isfile(BUNDLE):
    raise SystemExit(f"VOICECAT_BUNDLE_LIBRARY={BUNDLE}: no such file")


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        target = os.path.join(self.build_lib, "voicecat", "_bundled")
        shutil.rmtree(target, ignore_errors=True)  # never a copy left by an earlier build
        if BUNDLE:
            os.makedirs(target)
            shutil.copyfile(BUNDLE, os.path.join(target, "libvoicecat.so.0"))
            os.chmod(os.path.join(target, "libvoicecat.so.0"), 0o755)


class BundleDistribution(Distribution):
    def has_ext_modules(self) -> bool:
        return bool(BUNDLE)  # machine code inside: a platform wheel, installed to platlib


class BdistWheel(bdist_wheel):
    def get_tag(self):  # type: ignore[no-untyped-def]
        python, abi, plat = super().get_tag()
        if BUNDLE:
            return "py3", "none", plat  # machine code, but no Python ABI in it
        return python, abi, plat


setup(distclass=BundleDistribution, cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
