"""Marks shared by every test directory (tests/, gpu/, plugins/).

A test whose ``long`` mark comes from one of its parameters (``pytest.param(..., marks=long)``)
is the part of a parametrized sweep that ``make test`` leaves out (make test runs the sweep's
representative part: a dtype sample, a sweep's diagonal, 1 and 4 devices). Those get the mark
``long_sweep`` too: ``make test-long-sweeps`` runs them, which CI does on the newest JAX set,
where lowering differences between JAX lines show; CI runs the rest of ``make test-long``
(``make test-long-runs``: the end-to-end runs) on the pinned set.
"""
from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and any(mark.name == "long" for mark in callspec.marks):
            item.add_marker(pytest.mark.long_sweep)
