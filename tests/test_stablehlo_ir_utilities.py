"""The IR utilities of ``pjrtkit.stablehlo.ir`` on real programs lowered from JAX."""
import random

import jax.numpy as jnp
import numpy as np
from jax import lax

from pjrtkit.stablehlo.ir import (FRESH_ID_START, TERMINATORS, Op, clone_ops, free_uses,
                                  free_values, fresh_value, topological_order, walk_ops)
from pjrtkit.testing.programs import lower_program


def _loop_program():
    def fn(x, w):
        return lax.fori_loop(0, 3, lambda i, c: jnp.tanh(c @ w) + i, x)

    return lower_program(fn, np.ones((2, 4), np.float32), np.ones((4, 4), np.float32))


def test_free_values_are_the_outside_reads_of_regions():
    program = _loop_program()
    (loop,) = [op for op in walk_ops(program) if op.name == "stablehlo.while"]
    inside = {a.id for r in loop.regions for b in r.blocks for a in b.arguments}
    inside |= {v.id for r in loop.regions for b in r.blocks for op in b.ops for v in op.results}
    free = free_values(loop)
    assert free and not {v.id for v in free} & inside
    assert free_uses(loop) == {v.id for v in loop.operands} | {v.id for v in free}


def test_fresh_values_never_repeat_and_keep_the_type():
    program = _loop_program()
    value = program.main.arguments[0]
    made = [fresh_value(value) for _ in range(100)]
    assert len({v.id for v in made}) == 100
    assert all(v.id >= FRESH_ID_START and v.type == value.type for v in made)
    assert max(v.id for op in walk_ops(program) for v in op.results) < FRESH_ID_START


def test_topological_order_restores_a_shuffled_block():
    program = lower_program(lambda x: (jnp.exp(x) * 2 + jnp.sin(x), jnp.cos(x)),
                            np.ones(4, np.float32))
    ops = program.main.body.entry.ops
    assert topological_order(list(ops)) == ops  # already ordered: unchanged
    shuffled = list(ops)
    random.Random(0).shuffle(shuffled)
    ordered = topological_order(shuffled)
    defined = {a.id for a in program.main.arguments}
    for op in ordered:
        assert {v.id for v in op.operands} <= defined, f"{op.name} before its operands"
        defined |= {v.id for v in op.results}
    assert ordered[-1].name in TERMINATORS
    # a cycle: two ops reading each other's result
    a, b = fresh_value(ops[0].results[0]), fresh_value(ops[0].results[0])
    cyclic = [Op("stablehlo.negate", (b,), (a,), {}), Op("stablehlo.negate", (a,), (b,), {})]
    assert topological_order(cyclic) is None


def test_clone_ops_renames_reads_and_makes_fresh_results():
    program = _loop_program()
    ops = program.main.body.entry.ops
    arguments = program.main.arguments
    renamed = {a.id: fresh_value(a) for a in arguments}
    copies = clone_ops(ops, renamed)
    originals = {v.id for op in ops for v in op.results} | {a.id for a in arguments}
    for copy in copies:
        assert not {v.id for v in copy.operands} & originals
        assert not {v.id for v in copy.results} & originals
        for inner in (o for r in copy.regions for b in r.blocks for o in b.ops):
            assert not {v.id for v in inner.operands} & {a.id for a in arguments}
