"""The conformance suite: what a plugin author runs against a backend (or any PJRT plugin
library), in three layers (the C ABI, the hooks, JAX's surface), with its pytest plugin
(entry point ``pytest11``) and its JSON/markdown reports.

It comes with the extra ``pip install 'pjrtkit[conformance]'``, which brings pytest for the
pytest plugin; ``pjrtkit conformance`` and ``pjrtkit coverage`` call ``missing_requirements``
first and say how to install the extra when it is not there. A plain ``pip install pjrtkit``
never imports this package.
"""
from __future__ import annotations

import importlib.metadata
import re

EXTRA = "conformance"
INSTALL_HINT = "pip install 'pjrtkit[conformance]'"


def missing_requirements() -> list[str]:
    """The requirements of pjrtkit's ``conformance`` extra that are not installed (read from the
    installed distribution's metadata, so pyproject.toml stays the one list); [] when pjrtkit
    runs from a source tree that was never installed."""
    try:
        requirements = importlib.metadata.requires("pjrtkit") or []
    except importlib.metadata.PackageNotFoundError:
        return []
    missing = []
    for requirement in requirements:
        if not re.search(rf"""extra\s*==\s*["']{EXTRA}["']""", requirement):
            continue
        name = re.match(r"\s*([A-Za-z0-9._-]+)", requirement).group(1)
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    return missing
