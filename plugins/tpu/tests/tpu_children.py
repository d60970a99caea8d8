"""Child processes of the tpu plugin's tests: JAX fixes its platforms at the first backend use
and libtpu's platform ``tpu`` is best kept apart from pjrtkit's, so every JAX-level scenario
runs in a fresh interpreter of its own."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
PINNED_JAX = "0.10.2"


def child_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_PLATFORMS", "PJRTKIT_BACKENDS", "PJRTKIT_TPU_TOPOLOGY")}
    env["PYTHONPATH"] = str(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    # libtpu takes a lockfile (/tmp/libtpu_lockfile) per process unless told that several
    # processes load it; the tests' libtpu children may run side by side (pytest -n 2).
    env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    env.update(extra)
    return env


def start(args: list[str], **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env(**env))


def report_of(process: subprocess.Popen, timeout: float = 300) -> dict:
    """The JSON a child printed on its ``REPORT`` line; the test fails with its stderr else."""
    out, err = process.communicate(timeout=timeout)
    for line in out.splitlines():
        if line.startswith("REPORT "):
            return json.loads(line[len("REPORT "):])
    raise AssertionError(f"child exited {process.returncode} without a report:\n{err[-4000:]}")


def require_libtpu() -> None:
    """libtpu 0.0.42 (jax[tpu]==0.10.2's pin) is the ground truth; it works with jax 0.10.2
    only. Newer jax: skip saying so. The pinned set without libtpu: fail (it is in the test
    extras there, so a missing one is a broken environment, not a reason to skip)."""
    version = importlib.metadata.version("jax")
    if version != PINNED_JAX:
        pytest.skip(f"libtpu 0.0.42's compile-only topologies match jax {PINNED_JAX} only "
                    f"(installed: jax {version})")
    if importlib.util.find_spec("libtpu") is None:
        pytest.fail("libtpu is not installed; `make install` installs it on the pinned set "
                    "(constraints.txt, libtpu==0.0.42.1)")
