"""Shapes and programs shared by the fusion tests (fused groups, reductions, row programs)."""
import jax
import numpy as np

from pjrtkit_cpu.fusion.groups import MIN_ELEMENTS

ROWS, COLS = 64, 512  # 32k elements: above MIN_ELEMENTS
assert ROWS * COLS >= MIN_ELEMENTS


def normal(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def layernorm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b
