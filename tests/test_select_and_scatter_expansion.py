"""select_and_scatter through the core's expansion (pjrtkit.expansions.select_and_scatter): the
gradients of real JAX max and min pooling programs, expanded for a primitive set without
select_and_scatter and run with the NumPy reference rules, against XLA's CPU backend."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax._src.lax.windowed_reductions import _select_and_scatter  # lax's own, not exported

from expansion_support import RULES, primitives, run_expanded
from pjrtkit import expansions
from pjrtkit.errors import Unimplemented
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.testing.programs import lower_program, run_on_xla_cpu

WITHOUT = primitives(ops=RULES.op_names - {"stablehlo.select_and_scatter"})
rng = np.random.default_rng(11)


def pool_grad(reducer, init, window, strides, padding):
    def pooled_sum(x):
        pooled = lax.reduce_window(x, init, reducer, window, strides, padding)
        return jnp.sum(pooled * jnp.arange(pooled.size, dtype=x.dtype).reshape(pooled.shape))
    return jax.grad(pooled_sum)


CASES = {
    # the flax CNN's 2x2 max pool, NHWC
    "max_2x2_stride2": (lax.max, -jnp.inf, (1, 2, 2, 1), (1, 2, 2, 1), "VALID", (2, 6, 6, 3)),
    # overlapping windows: an operand element picked by several windows adds their sources
    "max_3x3_stride1_same": (lax.max, -jnp.inf, (1, 3, 3, 1), (1, 1, 1, 1), "SAME", (1, 5, 4, 2)),
    "max_3x3_stride2_same": (lax.max, -jnp.inf, (1, 3, 3, 1), (1, 2, 2, 1), "SAME", (2, 7, 5, 1)),
    "min_2_stride1_1d": (lax.min, jnp.inf, (2,), (1,), "VALID", (9,)),
    # explicit padding larger than the window: some windows are all padding and pick nothing
    "max_padded_past_window": (lax.max, -jnp.inf, (2, 2), (1, 1), ((2, 1), (0, 3)), (3, 4)),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pooling_gradients_match_xla(name, dtype):
    reducer, init, window, strides, padding, shape = CASES[name]
    fn = pool_grad(reducer, np.array(init, dtype), window, strides, padding)
    x = rng.normal(size=shape).astype(dtype)
    if name.startswith("max_2x2"):  # ties: the first position in the window is picked
        x[0, 0, 0, 0] = x[0, 0, 1, 0] = x[0, 1, 0, 0] = 3.0
    with jax.enable_x64(dtype == np.float64):
        program, (ours,) = run_expanded(fn, (x,), WITHOUT)
        (expected,) = run_on_xla_cpu(fn, (x,))
    names = {op.name for op in walk_ops(program)}
    assert "stablehlo.select_and_scatter" not in names
    np.testing.assert_allclose(ours, expected, rtol=1e-6, atol=1e-6)


def test_integer_pooling_gradient_with_a_constant_in_the_select_region():
    """A select region with a constant and two ops (compare of a negation) still vectorizes."""
    x = rng.integers(-9, 9, size=(6, 5)).astype(np.int32)
    src = rng.integers(-9, 9, size=(3, 4)).astype(np.int32)

    def fn(x, s):
        def select(a, b):
            return (-a) <= (-b + jnp.int32(0))   # max pooling, spelled the long way

        return _select_and_scatter(x, select, (2, 2), (2, 1), ((0, 0), (0, 0)), s,
                                       jnp.int32(0), lax.add)

    program, (ours,) = run_expanded(fn, (x, src), WITHOUT)
    (expected,) = run_on_xla_cpu(fn, (x, src))
    assert "stablehlo.select_and_scatter" not in {op.name for op in walk_ops(program)}
    np.testing.assert_array_equal(ours, expected)


def test_a_window_past_the_unroll_limit_stays_unimplemented_naming_it():
    fn = pool_grad(lax.max, np.float32(-np.inf), (9, 9), (1, 1), "VALID")
    program = lower_program(fn, np.zeros((12, 12), np.float32))
    with pytest.raises(Unimplemented, match="81 positions"):
        expansions.expand(program, WITHOUT)
