"""Pallas kernels in interpret mode (pl.pallas_call(..., interpret=True)) run on pjrtkit_cpu
and match XLA's CPU backend: the interpreter turns the kernel into ordinary JAX ops (loops over
the grid, dynamic slices of the blocks), which the plugin runs like any program."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from pjrtkit.testing.tolerances import assert_close


def _both(devices, fn, *args):
    return [np.asarray(jax.jit(fn)(*(jax.device_put(a, d) for a in args))) for d in devices]


def test_elementwise_kernel_matches_xla_cpu(devices):
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * 2 + jnp.exp(y_ref[...])

    def f(x, y):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              interpret=True)(x, y)

    rng = np.random.RandomState(0)
    x, y = rng.randn(16, 8).astype(np.float32), rng.randn(16, 8).astype(np.float32)
    ours, ref = _both(devices, f, x, y)
    assert_close(ours, ref, what="pallas elementwise")


def test_gridded_blocked_kernel_with_program_id_matches_xla_cpu(devices):
    def kernel(x_ref, w_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], w_ref[...]) + pl.program_id(0).astype(jnp.float32)

    def f(x, w):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((x.shape[0], w.shape[1]), x.dtype),
            grid=(x.shape[0] // 8,),
            in_specs=[pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0)),
                      pl.BlockSpec(w.shape, lambda i: (0, 0))],
            out_specs=pl.BlockSpec((8, w.shape[1]), lambda i: (i, 0)), interpret=True)(x, w)

    rng = np.random.RandomState(1)
    x, w = rng.randn(32, 16).astype(np.float32), rng.randn(16, 4).astype(np.float32)
    ours, ref = _both(devices, f, x, w)
    assert_close(ours, ref, what="pallas gridded matmul")
