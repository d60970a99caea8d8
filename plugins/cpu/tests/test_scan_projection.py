"""``pjrtkit_cpu.scan_projection``: a scan's input product ``x @ u`` computed for every step
before the loop. Real scans lowered from JAX, planned by the plugin, compared with XLA's CPU
backend (float32: only the order of each dot's sum may differ)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.testing.programs import lower_program, run_on_xla_cpu

from pjrtkit_cpu.lowering import RULES
from pjrtkit_cpu.plugin import compile_with_rules
from pjrtkit_cpu.scan_projection import project_scan_inputs


def _rnn(h0, xs, w, u, b):
    def step(h, x):
        h = jnp.tanh(h @ w + x @ u + b)
        return h, h.mean()
    return lax.scan(step, h0, xs)


def _args(rng, steps=20, batch=4, hidden=16, n=None):
    n = hidden if n is None else n
    return (np.zeros((batch, n), np.float32),
            rng.standard_normal((steps, batch, hidden)).astype(np.float32),
            (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32),
            (rng.standard_normal((hidden, n)) / np.sqrt(hidden)).astype(np.float32),
            rng.standard_normal(n).astype(np.float32))


def _loop(program):
    (loop,) = [op for op in program.main.body.entry.ops if op.name == "stablehlo.while"]
    return loop


def _body_dots(loop) -> int:
    return sum(op.name == "stablehlo.dot_general" for r in loop.regions for b in r.blocks
               for op in b.ops)


def _run(fn, args):
    compiled = compile_with_rules(lower_program(fn, *args), RULES)
    return [np.asarray(o) for o in compiled.executable.execute([list(args)], [None])[0]]


def test_the_input_product_moves_before_the_loop_and_results_match_xla(rng):
    args = _args(rng)
    program = lower_program(_rnn, *args)
    projected = project_scan_inputs(program)
    loop = _loop(projected)
    assert len(loop.operands) == len(_loop(program).operands) + 1
    before = [op for op in projected.main.body.entry.ops if op.name == "stablehlo.dot_general"]
    assert len(before) == 1 and before[0].results[0].type.shape == (20, 4, 16)
    assert _body_dots(loop) == 1  # h @ w stays (the dead x @ u goes with drop_dead_ops)
    ours, theirs = _run(_rnn, args), run_on_xla_cpu(_rnn, args)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


def test_a_projection_larger_than_the_inputs_is_left_in_the_loop(rng):
    # n > k: the projected inputs would take more memory than the inputs themselves.
    args = _args(rng, hidden=8, n=32)
    program = lower_program(_rnn, *args)
    assert project_scan_inputs(program) is program
    for a, b in zip(_run(_rnn, args), run_on_xla_cpu(_rnn, args)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


def test_a_weight_the_loop_changes_is_left_in_the_loop(rng):
    def decaying(h0, xs, w, u, b):
        def step(carry, x):
            h, u = carry
            h = jnp.tanh(h @ w + x @ u + b)
            return (h, u * 0.99), h.sum()
        return lax.scan(step, (h0, u), xs)

    args = _args(rng)
    program = lower_program(decaying, *args)
    assert project_scan_inputs(program) is program
    for a, b in zip(_run(decaying, args), run_on_xla_cpu(decaying, args)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


def test_the_rewritten_program_is_what_the_plugin_compiles(rng):
    args = _args(rng)
    compiled = compile_with_rules(lower_program(_rnn, *args), RULES)
    ops = list(walk_ops(lower_program(_rnn, *args)))
    assert sum(op.name == "stablehlo.dot_general" for op in ops) == 2
    plan = compiled.executable.plan
    assert any(op.name == "stablehlo.dot_general" for _k, _i, _o, op in plan.steps)


def test_a_product_the_step_carries_or_returns_reads_the_projection(rng):
    # x @ u is the next carry itself (the loop body returns the dot's result) and the step's
    # stacked output.
    def rnn_with_projection_out(h0, xs, w, u, b):
        def step(h, x):
            projection = x @ u
            return projection, (h @ w + projection + b).sum(axis=1)
        return lax.scan(step, h0, xs)

    args = _args(rng)
    program = lower_program(rnn_with_projection_out, *args)
    assert project_scan_inputs(program) is not program
    ours, theirs = _run(rnn_with_projection_out, args), run_on_xla_cpu(rnn_with_projection_out,
                                                                       args)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
