"""Shared by the JAX end-to-end tests. ``run_python``: a scenario in a fresh interpreter, because
JAX fixes its set of platforms at the first backend use. ``devices``: the device under test
(pjrtkit_cpu) and XLA's CPU device in this process, for tests that compare in-process (a process
whose JAX was started without either platform fails the test: a skip would hide the feature)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(__file__)


@pytest.fixture
def run_python():
    """``run_python(code, **env)``: run ``code`` (dedented) in a fresh interpreter with the
    JAX/pjrtkit selection variables cleared, ``env`` added, and this directory importable (for
    the test backends here, e.g. ``faulty_plugin``)."""

    def run(code: str, **env) -> subprocess.CompletedProcess:
        environment = {k: v for k, v in os.environ.items()
                       if k not in ("JAX_PLATFORMS", "PJRTKIT_BACKENDS", "PJRTKIT_CPU_DEVICES")}
        environment.update(env)
        environment["PYTHONPATH"] = HERE + os.pathsep + environment.get("PYTHONPATH", "")
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                              capture_output=True, text=True, env=environment, timeout=300)

    return run


PLATFORM = "pjrtkit_cpu"


@pytest.fixture(scope="session")
def devices():
    """(pjrtkit_cpu device, XLA cpu device)."""
    import jax

    from pjrtkit.conformance.jax_checks import REFERENCE_PLATFORM, configure_jax

    unavailable = configure_jax(PLATFORM)
    if unavailable is not None:
        pytest.fail(f"{unavailable}; run these tests in a fresh process without JAX_PLATFORMS")
    return jax.devices(PLATFORM)[0], jax.devices(REFERENCE_PLATFORM)[0]
