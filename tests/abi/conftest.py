"""Fixtures for ABI tests: the fake backends' PJRT_Api tables (registered once per process)."""
from __future__ import annotations

import pytest

from abi_support import FAKE, OTHER


@pytest.fixture(scope="session")
def table():
    from pjrtkit.abi.api import api_for_slot, register_backend

    _capsule, slot = register_backend(FAKE)
    return api_for_slot(slot)


@pytest.fixture(scope="session")
def other_table():
    from pjrtkit.abi.api import api_for_slot, register_backend

    _capsule, slot = register_backend(OTHER)
    return api_for_slot(slot)
