"""examples/multiprocess_train.py: data-parallel training across processes matches XLA's CPU
backend with the same number of processes, step by step (launcher-free on gloo, 2 and 4
processes; under mpiexec on MPI; a 2-host virtual TPU slice at TPU tolerance)."""
from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "multiprocess_train.py"
STEPS = 3


def _run(*args, **env):
    result = subprocess.run([sys.executable, str(SCRIPT), "--steps", str(STEPS), *args],
                            cwd=REPO, capture_output=True, text=True, timeout=1200,
                            env=dict(os.environ, **env))
    explained = f"exit {result.returncode}\n{result.stdout}\n{result.stderr[-4000:]}"
    assert result.returncode == 0, explained
    rows = re.findall(r"^step +(\d+) ", result.stdout, re.M)
    assert [int(r) for r in rows] == list(range(STEPS)), explained
    assert re.search(r"^PASS: worst relative difference", result.stdout, re.M), explained
    return result.stdout


needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="the gloo engine needs torch (pjrtkit[gloo])")


@needs_torch
@pytest.mark.parametrize("processes", [
    pytest.param(2, marks=pytest.mark.long), pytest.param(4, marks=pytest.mark.many_processes)])
def test_launcher_free_training_matches_xla(processes):
    out = _run("--processes", str(processes))
    assert f"pjrtkit_cpu: {processes} processes, {2 * processes} devices (launcher-free" in out


@pytest.mark.long
@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                    reason="the MPI engine needs mpi4py and an MPI (pjrtkit[mpi])")
def test_training_under_mpiexec_on_mpi_matches_xla():
    out = _run("--launcher", "mpiexec")
    assert "(mpiexec, MPI)" in out


@pytest.mark.long
@needs_torch
def test_a_two_host_tpu_slice_trains_within_tpu_tolerance():
    out = _run("--backend", "pjrtkit_tpu")
    assert "pjrtkit_tpu: 2 processes, 8 devices" in out and "tolerance 0.02" in out
