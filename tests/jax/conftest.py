"""Fixture `devices`: the device under test (pjrtkit_cpu) and XLA's CPU device, in this process.

Tests of JAX features run in-process against both devices and compare; a process whose JAX
was started without either platform fails the test (a skip would hide the feature).
"""
from __future__ import annotations

import pytest

PLATFORM = "pjrtkit_cpu"


@pytest.fixture(scope="session")
def devices():
    """(pjrtkit_cpu device, XLA cpu device)."""
    import jax

    from pjrtkit.testing.conformance.jax_checks import REFERENCE_PLATFORM, configure_jax

    unavailable = configure_jax(PLATFORM)
    if unavailable is not None:
        pytest.fail(f"{unavailable}; run these tests in a fresh process without JAX_PLATFORMS")
    return jax.devices(PLATFORM)[0], jax.devices(REFERENCE_PLATFORM)[0]
