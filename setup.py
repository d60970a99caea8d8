# cffi_modules has no pyproject.toml spelling yet; everything else lives in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["core/pjrtkit/abi/_build.py:ffibuilder",
                     "core/pjrtkit/elementwise_vm/_build.py:ffibuilder"])
