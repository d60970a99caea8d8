"""Fixtures for pjrtkit-gpu's tests: ``agrees_with_xla`` runs a JAX function on the emulated GPU
(``gpu_support``) and on XLA's CPU backend in the same process and compares them."""
from __future__ import annotations

import pytest

from pjrtkit.testing.programs import run_on_xla_cpu
from pjrtkit.testing.tolerances import assert_close

from gpu_support import run_on_gpu


@pytest.fixture
def agrees_with_xla():
    """``check(fn, *args)``: fn on the emulated GPU equals fn on XLA's CPU backend (per-dtype
    tolerance; integers and bools exactly)."""

    def check(fn, *args, static_argnums=(), loosen=1.0):
        ours = run_on_gpu(fn, *args, static_argnums=static_argnums)
        reference = run_on_xla_cpu(fn, args, static_argnums=static_argnums)
        assert len(ours) == len(reference)
        for i, (a, b) in enumerate(zip(ours, reference)):
            assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, a.shape, b.dtype,
                                                               b.shape)
            assert_close(a, b, what=f"output {i}", loosen=loosen)
        return ours

    return check


@pytest.fixture(autouse=True)
def _x64_off():
    """These tests build their programs with x64 off, as JAX defaults; the cpu plugin's test
    conftest turns x64 on for its whole process, and pytest-xdist can put both in one worker."""
    import jax

    with jax.enable_x64(False):
        yield
