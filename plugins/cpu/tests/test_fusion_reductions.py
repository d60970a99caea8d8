"""Fused loops that end in reductions, absorb constants and single ops with broadcasts.

Same harness as ``test_fusion`` (``check_fused``: real JAX programs, fused, planned, run before
and after the background compile, compared with XLA's CPU backend).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.testing.programs import lower_program

from pjrtkit_cpu.fusion import FUSED_OP, fuse_program

from fusion_support import COLS, ROWS, normal

pytestmark = pytest.mark.usefixtures("private_fusion_cache")


def _fused_inner_ops(fn, *args) -> list[set[str]]:
    program = fuse_program(lower_program(fn, *args))
    return [{inner.name.removeprefix("stablehlo.") for inner in op.regions[0].entry.ops}
            for op in walk_ops(program) if op.name == FUSED_OP]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sum_of_long_rows_matches_xla(check_fused, rng, dtype):
    # 1024-element rows with a large common offset: a sequential f32 sum would drift by many
    # ulps; the blocked (vector-lane) sum stays within the tolerance of XLA's.
    x = normal(rng, ROWS // 2, 1024, dtype=dtype) * 3 + 100

    def fn(x):
        return jnp.sum(x * 1.5, axis=-1), jnp.mean(jnp.square(x - 100), axis=-1)

    check_fused(fn, x, inside={"reduce", "multiply"})


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_min_reductions_of_infinities_and_signed_zeros(check_fused, rng, dtype):
    x = normal(rng, ROWS, COLS, dtype=dtype)
    x[2, :] = -0.0
    x[2, 100] = 0.0
    x[3, :] = 0.0
    x[3, 5] = -0.0
    x[4, 9] = np.inf
    x[5, :] = -np.inf
    x[6, 11] = -np.inf

    def fn(x):
        y = x * 1.0
        return jnp.max(y, axis=-1), jnp.min(y, axis=-1), jnp.max(-y, axis=-1)

    check_fused(fn, x, inside={"reduce"})


def test_reduction_and_elementwise_outputs_of_one_loop(check_fused, rng):
    x = normal(rng, ROWS, COLS)

    def fn(x):
        e = jnp.exp(x * 0.5) - 1
        return e, jnp.sum(e, axis=-1), jnp.max(e, axis=-1)

    check_fused(fn, x, inside={"reduce", "exponential"})


def test_rank1_reduction_to_a_scalar_with_an_init_value(check_fused, rng):
    x = normal(rng, ROWS * COLS)

    def fn(x):
        return (jax.lax.reduce(x * 2 + 1, np.float32(5), jax.lax.add, (0,)),
                jax.lax.reduce(x - 3, np.float32(-7), jax.lax.max, (0,)))

    check_fused(fn, x, inside={"reduce"})


def test_reductions_over_outer_axes_stay_unfused(check_fused, rng):
    x = normal(rng, ROWS, COLS)

    def fn(x):
        return jnp.sum(x * 2 + 1, axis=0), jnp.sum(x * 3 - 1, axis=(0, 1))

    check_fused(fn, x)
    assert all("reduce" not in ops for ops in _fused_inner_ops(fn, x))


def test_softmax_reads_its_reductions_back_without_a_cycle(check_fused, rng):
    x = normal(rng, 8, 4, 64, 64) * 5

    def fn(x):
        m = jnp.max(x, axis=-1, keepdims=True)
        e = jnp.exp(x - m)
        return e / jnp.sum(e, axis=-1, keepdims=True)

    check_fused(fn, x, inside={"reduce", "exponential", "divide"})


def test_single_select_of_a_broadcast_mask_is_fused(check_fused, rng):
    mask = rng.random((64, 64)) > 0.5
    x = normal(rng, 8, 4, 64, 64)

    def fn(mask, x):
        return jnp.where(mask, x, np.float32(-1e9))

    check_fused(fn, mask, x, inside={"select"})


def test_float64_transcendentals_stay_unfused(check_fused, rng):
    x = normal(rng, ROWS, COLS, dtype=np.float64)

    def fn(x):
        return jnp.exp(x * 2 + 1) * 3 - 1

    check_fused(fn, x)
    assert all("exponential" not in ops for ops in _fused_inner_ops(fn, x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_min_reductions_follow_the_spec_on_nan_and_signed_zeros(registry, rng, dtype):
    """A NaN anywhere in a row makes its max/min NaN, and +0 is above -0 (StableHLO's maximum
    and minimum; the unfused kernel, np.maximum.reduce, agrees on NaN). Not compared with XLA:
    its vectorized reductions keep or drop a NaN, and pick either zero, depending on where the
    values fall among the vector lanes."""
    from pjrtkit.lowering.plan import build_plan

    from pjrtkit_cpu.fusion import cache
    from pjrtkit_cpu.fusion.kernel import STATS

    x = normal(rng, ROWS, COLS, dtype=dtype)
    x[0, 7] = np.nan
    x[1, 3] = -np.nan
    x[2, COLS - 1] = np.nan
    x[3, 0] = np.nan
    x[3, 1] = np.inf
    x[4, :] = -0.0
    x[4, 100] = 0.0
    x[5, :] = 0.0
    x[5, 5] = -0.0

    def fn(x):
        y = x * 1.0
        return jnp.max(y, axis=-1), jnp.min(y, axis=-1)

    plan = build_plan(fuse_program(lower_program(fn, x)), registry)
    with np.errstate(all="ignore"):
        plan(x)
        cache.wait_all(timeout=120)
        before = STATS["fused"]
        got_max, got_min = plan(x)
        assert STATS["fused"] > before
    np.testing.assert_array_equal(got_max, np.max(x, axis=-1))  # (== ignores zero signs)
    np.testing.assert_array_equal(got_min, np.min(x, axis=-1))
    assert np.isnan(got_max[:4]).all() and np.isnan(got_min[:4]).all()
    assert got_max[4] == 0 and not np.signbit(got_max[4]) and np.signbit(got_min[4])
    assert got_max[5] == 0 and not np.signbit(got_max[5]) and np.signbit(got_min[5])


def test_transposed_operands_are_read_in_place(check_fused, rng):
    """A transpose feeding the group is absorbed (its operand read with permuted strides, no
    copy), also when the group itself produced that operand (square: it cannot join)."""
    a = normal(rng, 512, 96)
    b = normal(rng, 96, 512)
    s = normal(rng, 192, 192)
    c = normal(rng, 8, 16, 32, 8)

    def fn(a, b, s, c):
        y = s * 2 + 1
        return (b - np.float32(0.01) * a.T, y.T + y, jnp.transpose(c, (0, 2, 3, 1)) * 3 - 1,
                jnp.exp(jnp.transpose(c, (3, 1, 0, 2))) + 1)

    check_fused(fn, a, b, s, c, inside={"transpose"})


def test_transposed_reads_in_tiles_cover_every_element(check_fused, rng):
    """Groups that read an input transposed run in tiles (``codegen.TRANSPOSE_TILE``): sizes
    that are no multiple of the tile, a broadcast input beside the transposed one, a rank-3
    group, and rows shorter than a tile (row by row)."""
    from pjrtkit_cpu.fusion import codegen
    from pjrtkit_cpu.fusion.codegen import InputKind

    assert codegen._tile((301, 37), [InputKind("strided", (1, 301))]) == codegen.TRANSPOSE_TILE
    assert codegen._tile((301, 37), [InputKind("full")]) == 0
    assert codegen._tile((4, 301), [InputKind("strided", (1, 4))]) == 0
    a = normal(rng, 61, 301)
    bias = normal(rng, 301)
    c = normal(rng, 19, 43, 23)
    r = normal(rng, 7, 2501)  # transposed rows of 7: shorter than a tile, row by row

    def fn(a, bias, c, r):
        return (a.T * bias[:, None] - 1, jnp.transpose(c, (2, 0, 1)) * 2 + 1,
                jnp.exp(r.T) + 1)

    check_fused(fn, a, bias, c, r, inside={"transpose"})
