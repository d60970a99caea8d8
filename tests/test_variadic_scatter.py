"""A scatter of several operands as one scatter per operand (pjrtkit.expansions.variadic_scatter):
complex scatters from real JAX programs, expanded onto real parts, then split, against XLA's CPU
backend; a combiner that mixes its operands is left whole."""
from __future__ import annotations

import numpy as np
import pytest

from expansion_support import RULES, primitives, replace_ops
from pjrtkit import expansions
from pjrtkit.expansions.variadic_scatter import scatter_per_operand, separable_combiner
from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.stablehlo.loader import load_program
from pjrtkit.testing.programs import lower_program, run_on_xla_cpu

rng = np.random.default_rng(7)
X = (rng.normal(size=(5, 3)) + 1j * rng.normal(size=(5, 3))).astype(np.complex64)
U = (rng.normal(size=(4, 3)) + 1j * rng.normal(size=(4, 3))).astype(np.complex64)
IDX = np.array([4, 0, 2, 0], np.int32)   # a repeated index: the add must combine both

CASES = {
    "set": lambda x, u, i: x.at[i[:3]].set(u[:3]),
    "add": lambda x, u, i: x.at[i].add(u),
    "mul": lambda x, u, i: x.at[i[:3]].multiply(u[:3]),
}


@pytest.mark.parametrize("name", ["set", "add"])
def test_a_complex_scatter_runs_as_one_scatter_per_part(name):
    fn = CASES[name]
    program = expansions.expand(lower_program(fn, X, U, IDX), primitives(lacking=[np.complex64]))
    scatters = [op for op in walk_ops(program) if op.name == "stablehlo.scatter"]
    assert scatters and all(len(op.results) == 2 and separable_combiner(op) for op in scatters)
    replace_ops(program, "stablehlo.scatter", scatter_per_operand)
    scatters = [op for op in walk_ops(program) if op.name == "stablehlo.scatter"]
    assert scatters and all(len(op.results) == 1 for op in scatters)
    ours = build_plan(program, RULES)(X, U, IDX)
    (expected,) = run_on_xla_cpu(fn, (X, U, IDX))
    got = np.asarray(ours[0]) if len(ours) == 1 else np.asarray(ours[0]) + 1j * np.asarray(ours[1])
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_a_complex_multiply_combiner_mixes_the_parts_and_is_left_whole():
    program = expansions.expand(lower_program(CASES["mul"], X, U, IDX),
                                primitives(lacking=[np.complex64]))
    (scatter,) = [op for op in walk_ops(program) if op.name == "stablehlo.scatter"]
    assert len(scatter.results) == 2 and not separable_combiner(scatter)
    assert scatter_per_operand(scatter, program) == [scatter]


MIXING = """
func.func public @main(%x: tensor<4xf32>, %y: tensor<4xi32>, %i: tensor<2x1xi32>,
                       %u: tensor<2xf32>, %v: tensor<2xi32>) -> (tensor<4xf32>, tensor<4xi32>) {
  %r:2 = "stablehlo.scatter"(%x, %y, %i, %u, %v) ({
  ^bb0(%a: tensor<f32>, %b: tensor<i32>, %c: tensor<f32>, %d: tensor<i32>):
    %p = stablehlo.compare GT, %c, %a : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %m = stablehlo.select %p, %c, %a : tensor<i1>, tensor<f32>
    %n = stablehlo.select %p, %d, %b : tensor<i1>, tensor<i32>
    stablehlo.return %m, %n : tensor<f32>, tensor<i32>
  }) {scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0],
      scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}
     : (tensor<4xf32>, tensor<4xi32>, tensor<2x1xi32>, tensor<2xf32>, tensor<2xi32>)
       -> (tensor<4xf32>, tensor<4xi32>)
  return %r#0, %r#1 : tensor<4xf32>, tensor<4xi32>
}
"""


def test_an_arg_max_scatter_mixes_its_operands_and_is_left_whole():
    program = load_program(MIXING)
    (scatter,) = [op for op in walk_ops(program) if op.name == "stablehlo.scatter"]
    assert not separable_combiner(scatter)
    assert scatter_per_operand(scatter, program) == [scatter]
