"""A JAX program on pjrtkit_cpu gives the same bits whether or not the user's thread flushes
subnormals (as it does after loading a library built with -ffast-math): pjrtkit compiles in
C's default floating-point environment and runs on threads that start in it, and gives the
user's thread its state back (``pjrtkit.fp_state``)."""
from __future__ import annotations

import numpy as np
import pytest

from pjrtkit import fp_state

pytestmark = pytest.mark.skipif(not fp_state.can_set_flush_subnormals(),
                                reason="sets x86's FTZ/DAZ bits (x86-64 Linux only)")


def _program(c, xp):
    # each op rounded once (no contraction, no rewrite of XLA's): IEEE arithmetic, as NumPy's
    def fn(a):
        return a * c, a + c, xp.maximum(a, c), (a - c) == a

    return fn


def test_results_do_not_depend_on_the_callers_flushing(devices):
    import jax
    import jax.numpy as jnp

    device, _ = devices
    # a constant and inputs that a flushing thread reads as zero
    c = np.float32(2 * np.finfo(np.float32).smallest_subnormal)
    x = np.array([0.0, -0.0, np.inf, 1e-45, 3e-45, 1.0, -2.0, 1e-38], np.float32)
    with fp_state.default_environment(), np.errstate(all="ignore"):
        want = [np.asarray(r) for r in _program(c, np)(x)]  # NumPy, keeping subnormals
    with fp_state.default_environment():  # (the thread's state before, afterwards)
        fp_state.set_flush_subnormals(True)
        # compiled and run while the caller flushes
        got = jax.block_until_ready(jax.jit(_program(c, jnp))(jax.device_put(x, device)))
        assert fp_state.flushes_subnormals(), "the caller's state was not given back"
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.dtype == w.dtype and np.array_equal(g.view(np.uint8), w.view(np.uint8)), (g, w)
