"""``pjrtkit.stablehlo.simplify``: rewrites that change what a code generator sees, never a
result. Real programs lowered from JAX (and one written out, for converts inside a loop body),
planned with the reference rules before and after."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.stablehlo.loader import load_program
from pjrtkit.reference import REFERENCE
from pjrtkit.stablehlo.simplify import (drop_dead_ops, drop_identity_converts,
                                        drop_scheduling_hints)
from pjrtkit.testing.programs import lower_program


def _names(program) -> list[str]:
    return [op.name for op in walk_ops(program)]


def _run(program, *args):
    return [np.asarray(r) for r in build_plan(program, REFERENCE)(*args)]


def _three_trips(arguments: str, before: str, body: str, after: str):
    """A program whose main runs ``before``, then a loop of three trips over ``%v = %x`` whose
    body (``body``, reading ``%i`` and ``%v``) ends with ``%m``, then ``after`` (reading the
    loop's ``%r#1``) returning ``%out``."""
    return load_program(f"""
module @m attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32}} {{
  func.func public @main({arguments}) -> tensor<4xf32> {{
{before}
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %r:2 = stablehlo.while(%i = %zero, %v = %x) : tensor<i32>, tensor<4xf32>
      cond {{
        %three = stablehlo.constant dense<3> : tensor<i32>
        %lt = stablehlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %lt : tensor<i1>
      }} do {{
        %one = stablehlo.constant dense<1> : tensor<i32>
        %next = stablehlo.add %i, %one : tensor<i32>
{body}
        stablehlo.return %next, %m : tensor<i32>, tensor<4xf32>
      }}
{after}
    return %out : tensor<4xf32>
  }}
}}
""")


def test_the_convert_of_a_weak_typed_scalar_is_dropped_and_results_stay():
    # JAX passes the Python scalar of `x * 0.999` as an f32[] argument and converts it to f32
    # (with x64 on, an f64[] argument and a real conversion).
    with jax.enable_x64(False):
        program = lower_program(lambda x, s: x * s, np.linspace(-1, 1, 7, dtype=np.float32),
                                0.999)
    assert "stablehlo.convert" in _names(program)
    simplified = drop_identity_converts(program)
    assert "stablehlo.convert" not in _names(simplified)
    (broadcast,) = [op for op in walk_ops(simplified) if op.name == "stablehlo.broadcast_in_dim"]
    assert broadcast.operands[0] is simplified.main.arguments[1]
    args = (np.linspace(-1, 1, 7, dtype=np.float32), np.float32(0.999))
    for before, after in zip(_run(program, *args), _run(simplified, *args)):
        assert before.dtype == after.dtype and np.array_equal(before, after)


def test_converts_that_change_the_type_stay_and_nothing_else_changes():
    program = lower_program(lambda x: (x.astype(np.float16) * 2, x.astype(np.int32)),
                            np.linspace(-3, 3, 5, dtype=np.float32))
    assert _names(program).count("stablehlo.convert") == 2
    assert drop_identity_converts(program) is program


def test_identity_converts_inside_a_loop_body_and_in_a_chain_are_dropped():
    program = _three_trips(
        "%x: tensor<4xf32>, %s: tensor<f32>",
        """    %c = stablehlo.convert %s : tensor<f32>
    %cc = stablehlo.convert %c : tensor<f32>""",
        """        %vv = stablehlo.convert %v : tensor<4xf32>
        %b = stablehlo.broadcast_in_dim %cc, dims = [] : (tensor<f32>) -> tensor<4xf32>
        %m = stablehlo.multiply %vv, %b : tensor<4xf32>""",
        "    %out = stablehlo.convert %r#1 : tensor<4xf32>")
    assert _names(program).count("stablehlo.convert") == 4
    simplified = drop_identity_converts(program)
    assert "stablehlo.convert" not in _names(simplified)
    (multiply,) = [op for op in walk_ops(simplified) if op.name == "stablehlo.multiply"]
    (broadcast,) = [op for op in walk_ops(simplified) if op.name == "stablehlo.broadcast_in_dim"]
    assert broadcast.operands[0] is simplified.main.arguments[1]
    assert multiply.operands[1] is broadcast.results[0]
    x, s = np.array([1, -2, 3.5, 0.25], np.float32), np.float32(0.5)
    (before,), (after,) = _run(program, x, s), _run(simplified, x, s)
    assert np.array_equal(before, after) and np.array_equal(after, x * s ** 3)


def test_dead_ops_and_chains_go_and_effects_stay():
    program = _three_trips(
        "%x: tensor<4xf32>, %k: tensor<2xui64>",
        """    %dead1 = stablehlo.add %x, %x : tensor<4xf32>
    %dead2 = stablehlo.multiply %dead1, %dead1 : tensor<4xf32>
    %k2, %bits = stablehlo.rng_bit_generator %k, algorithm = DEFAULT
      : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)""",
        """        %unused = stablehlo.exponential %dead2 : tensor<4xf32>
        %m = stablehlo.multiply %v, %v : tensor<4xf32>""",
        "    %out = stablehlo.negate %r#1 : tensor<4xf32>")
    simplified = drop_dead_ops(program)
    names = _names(simplified)
    # the dead chain goes, the one reading it from inside the loop body first
    assert "stablehlo.exponential" not in names and "stablehlo.add" in names
    assert names.count("stablehlo.add") == 1 and names.count("stablehlo.multiply") == 1
    assert "stablehlo.rng_bit_generator" in names  # an effect (state) stays though unread
    assert drop_dead_ops(simplified) is simplified
    x, k = np.array([1, -2, 0.5, 3], np.float32), np.array([1, 2], np.uint64)
    (before,), (after,) = _run(program, x, k), _run(simplified, x, k)
    assert np.array_equal(before, after) and np.array_equal(after, -(x ** 8))


def test_a_program_without_dead_ops_is_returned_as_it_is():
    program = lower_program(lambda x, y: (x * y + 1, jnp.tanh(x)), np.ones(3, np.float32),
                            np.ones(3, np.float32))
    assert drop_dead_ops(program) is program


def _scheduled(x):
    # jax.experimental.control_deps orders c before b before a for XLA's scheduler, in the
    # entry function and inside a loop body.
    schedule = pytest.importorskip("jax.experimental.control_deps",
                                   reason="jax 0.10 only (gone from 0.11)").schedule

    a, b, c = jnp.sin(x @ x), jnp.cos(x + 1), jnp.exp(x * 0.5)
    schedule([c, b, a])

    def step(carry, _):
        d, e = carry * 2, carry - 1
        schedule([e, d])
        return d + e, None

    return jax.lax.scan(step, a + b + c, None, length=2)[0]


def test_scheduling_hints_go_everywhere_and_results_stay():
    x = np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3)
    program = lower_program(_scheduled, x)
    hints = [op for op in walk_ops(program) if op.name == "stablehlo.custom_call"
             and op.attributes.get("call_target_name") == "control_dep"]
    assert len(hints) == 3  # two in main, one in the loop body
    simplified = drop_scheduling_hints(program)
    assert "stablehlo.custom_call" not in _names(simplified)
    assert drop_scheduling_hints(simplified) is simplified
    with jax.default_device(jax.devices("cpu")[0]):
        expected = np.asarray(jax.jit(_scheduled)(x))  # XLA's CPU backend honours the hints
    (got,) = _run(simplified, x)
    np.testing.assert_allclose(got, expected, rtol=2e-6)


def test_a_program_without_scheduling_hints_is_returned_as_it_is():
    program = lower_program(lambda x: jnp.sin(x) + 1, np.ones(3, np.float32))
    assert drop_scheduling_hints(program) is program
