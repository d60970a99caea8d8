"""Shared by the JAX end-to-end tests: each scenario runs in a fresh interpreter, because JAX
fixes its set of platforms at the first backend use."""
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
