"""Elementwise fusion: a chain becomes one fused op, values read outside the group are its
outputs, and results stay XLA's."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.testing.programs import lower_program

from pjrtkit_gpu.fusion import FUSED, fuse_elementwise


def _names(program):
    return [op.name for op in walk_ops(program)]


def test_a_chain_becomes_one_fused_op():
    x = np.ones((4, 5), np.float32)
    program = fuse_elementwise(lower_program(lambda a: jnp.tanh(a * 2.0 + 1.0) - a, x))
    top = [op.name for op in program.main.body.entry.ops]
    assert top.count(FUSED) == 1
    assert not {"stablehlo.multiply", "stablehlo.add", "stablehlo.tanh",
                "stablehlo.subtract"} & set(top)


def test_a_member_read_outside_the_group_is_an_output(agrees_with_xla):
    x = np.linspace(-2, 2, 20, dtype=np.float32).reshape(4, 5)

    def fn(a):
        b = jnp.exp(a) * 3.0
        return b + 1.0, jnp.sum(b, axis=0), b

    program = fuse_elementwise(lower_program(fn, x))
    fused = [op for op in program.main.body.entry.ops if op.name == FUSED]
    assert fused and any(len(op.results) >= 2 for op in fused)
    agrees_with_xla(fn, x)


def test_fusion_leaves_the_input_program_unchanged():
    x = np.ones((3,), np.float32)
    program = lower_program(lambda a: a * 2.0 + 1.0, x)
    before = _names(program)
    fuse_elementwise(program)
    assert _names(program) == before


def test_broadcasts_are_read_through_an_index_not_materialized(agrees_with_xla):
    """Scalar constants and a row statistic broadcast back over the rows (layernorm's shape)
    join the fused kernel: the group has broadcast members, and no broadcast is left for the
    strided copy."""
    x = np.linspace(-2, 2, 60, dtype=np.float32).reshape(3, 4, 5)

    def fn(a):
        mean = jnp.mean(a, axis=-1, keepdims=True)
        centered = (a - mean) * 1.5 + 0.25
        col = jnp.max(a, axis=1, keepdims=True)   # a middle dimension broadcast back
        return centered * jax.lax.rsqrt(jnp.mean(centered * centered, axis=-1,
                                                 keepdims=True) + 1e-5) - col

    program = fuse_elementwise(lower_program(fn, x))
    top = program.main.body.entry.ops
    fused = [op for op in top if op.name == FUSED]
    assert fused and any(inner.name == "stablehlo.broadcast_in_dim"
                         for op in fused for inner in op.regions[0].entry.ops)
    # what stays outside only adds size-1 dimensions (keepdims): a view, not a copy
    assert all(op.operands[0].type.size == op.results[0].type.size
               for op in top if op.name == "stablehlo.broadcast_in_dim")
    agrees_with_xla(fn, x)
