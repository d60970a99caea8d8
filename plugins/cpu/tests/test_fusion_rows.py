"""Row programs: fused loops over the same rows chained through per-row values, run as one loop.

Same harness as ``test_fusion`` (``check_fused``: real JAX programs, fused, planned, run before
and after the background compile, compared with XLA's CPU backend); each test also checks that
the row program was built (or, for the fallbacks, not built) and that the row kernel ran.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.testing.programs import lower_program

from pjrtkit_cpu.fusion import FUSED_OP, fuse_program, rows
from pjrtkit_cpu.fusion.kernel import stage_parts

from fusion_support import COLS, ROWS, layernorm, normal

pytestmark = pytest.mark.usefixtures("private_fusion_cache")


def _row_programs(fn, *args) -> list:
    return [op for op in walk_ops(fuse_program(lower_program(fn, *args)))
            if op.name == rows.ROWS_OP]


def _stages(op) -> int:
    return sum(inner.name == FUSED_OP for inner in op.regions[0].entry.ops)


@pytest.fixture
def check_rows(check_fused):
    """check_rows(fn, *args, stages=k): ``fn`` has one row program of k stages, its kernel ran
    and every output matches XLA."""

    def run(fn, *args, stages, loosen=1.0):
        programs = _row_programs(fn, *args)
        assert [_stages(op) for op in programs] == [stages]
        before = dict(rows.STATS)
        out = check_fused(fn, *args, loosen=loosen)
        # (the fallback, the region's separate loops, served the first call unless an
        # earlier test compiled the same kernel)
        assert rows.STATS["rows"] > before["rows"], "the row kernel never ran"
        return out

    return run


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layernorm_is_one_row_program(check_rows, rng, dtype):
    x = normal(rng, ROWS, COLS, dtype=dtype) * 3 + 1
    check_rows(layernorm, x, normal(rng, COLS, dtype=dtype), normal(rng, COLS, dtype=dtype),
               stages=3)


def test_layernorm_of_long_rows_with_offset(check_rows, rng):
    # 1024-element rows with a common offset: the mean and variance sums stay within the
    # tolerance of XLA's (the row reductions are those of the separate loops). (A far larger
    # offset makes x - mean ill-conditioned: NumPy's unfused result and XLA's already differ.)
    x = normal(rng, 32, 1024) * 3 + 5
    check_rows(layernorm, x, normal(rng, 1024), normal(rng, 1024), stages=3)


def test_softmax_reads_the_exponentials_from_the_row_buffer(check_rows, rng):
    x = normal(rng, ROWS, COLS) * 10
    x[3, :] = -np.inf          # a row of -inf: max -inf, exp(nan) -> nan, like XLA
    x[4, 7] = np.inf
    x[5, 9] = np.nan
    x[6, :] = 80.0             # exp would overflow without the max subtracted
    check_rows(lambda x: jax.nn.softmax(x, axis=-1), x, stages=3)


def test_masked_attention_softmax_after_a_call(check_rows, rng):
    # The scaled scores go through jnp.where (a private function, outside every program):
    # the max that reads its result starts a new program rather than joining the scaling.
    scores = normal(rng, 2, 4, 64, 64) * 3
    mask = np.tril(np.ones((64, 64), bool))

    def fn(s, mask):
        return jax.nn.softmax(jnp.where(mask, s * 0.125, -1e9), axis=-1)

    check_rows(fn, scores, mask, stages=3)


def test_rank3_layernorm_with_per_row_outputs(check_rows, rng):
    # Transformer shapes [batch, tokens, features]; the statistics are outputs too (one per
    # row), and a per-row op after the last stage stays outside.
    x = normal(rng, 4, 16, COLS) * 2 - 1

    def fn(x, g):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        out = (x - mean) * jax.lax.rsqrt(var + 1e-6) * g
        return out, mean[..., 0] * 2, var, jnp.max(out, axis=-1) - 1

    check_rows(fn, x, normal(rng, COLS), stages=3)


def test_per_row_value_through_an_outside_op_splits_the_program(check_fused, rng):
    # The mean goes through a cumulative sum over rows before the second loop reads it: that
    # op is not per-row, so the loops cannot run row by row (no row program), and the result
    # still matches XLA.
    x = normal(rng, ROWS, COLS)

    def fn(x):
        m = jnp.cumsum(jnp.mean(x, axis=-1, keepdims=True), axis=0)
        return jnp.sum(jnp.square(x - m), axis=-1)

    assert _row_programs(fn, x) == []
    check_fused(fn, x)


def test_integer_and_select_per_row_ops(check_rows, rng):
    x = normal(rng, ROWS, COLS) * 4

    def fn(x):
        count = jnp.sum((x > 0).astype(np.float32), axis=-1, keepdims=True)
        scale = jax.lax.select(count > COLS // 2, 1.0 / jnp.maximum(count, 1.0),
                               jnp.full_like(count, -0.0))
        return x * scale + 1

    check_rows(fn, x, stages=2)


def test_jnp_var_is_a_call_each_side_of_which_is_a_row_program(check_fused, rng):
    # jnp.var is a private function: the call is an op outside the program that does not read
    # the program's values, so the mean and the normalization still chain (two stages), and
    # the function's own mean and sum of squares make a second program.
    x = normal(rng, 4, 16, COLS)

    def fn(x):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(jnp.var(x, axis=-1, keepdims=True) + 1e-5)

    assert sorted(_stages(op) for op in _row_programs(fn, x)) == [2, 2]
    check_fused(fn, x)


def test_disabled_row_programs_leave_the_separate_loops(monkeypatch, rng):
    monkeypatch.setattr(rows, "ENABLED", False)
    x = normal(rng, ROWS, COLS)
    assert _row_programs(layernorm, x, normal(rng, COLS), normal(rng, COLS)) == []


def test_a_stage_moved_before_its_inputs_is_refused(rng):
    # The generator reads values in member order; a region whose normalizing stage comes
    # before the per-row ops it reads is an error, never a kernel reading stale locals.
    x = normal(rng, ROWS, COLS)
    (op,) = _row_programs(layernorm, x, normal(rng, COLS), normal(rng, COLS))
    block = op.regions[0].entry
    *members, terminator = block.ops
    last = max(i for i, m in enumerate(members) if m.name == FUSED_OP)
    broken = [members[last], *members[:last], *members[last + 1:], terminator]
    region = dataclasses.replace(op.regions[0], blocks=[dataclasses.replace(block, ops=broken)])
    source = rows.kernel_source(op, FUSED_OP, stage_parts)
    assert "prefetch(in0" in source and source.count("for c in range") >= 4
    with pytest.raises(ValueError, match="before the member that makes it"):
        rows.kernel_source(dataclasses.replace(op, regions=(region,)), FUSED_OP, stage_parts)
