"""``pjrtkit_cpu.dot_layout``: a contraction whose result is only transposed (directly, or
after an all-reduce over devices) is computed with its operands swapped. The rewritten
programs run on every device of a launch and match the untransformed arithmetic."""
from __future__ import annotations

import threading

import numpy as np

from pjrtkit.collectives.launch import Launch, running_as
from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.stablehlo.loader import load_program

from pjrtkit_cpu.dot_layout import swap_transposed_dots
from pjrtkit_cpu.lowering import RULES

SUM = """({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>,
      channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>,
      use_global_device_ids} : (tensor<3x5xf32>) -> tensor<3x5xf32>"""

# A weight gradient as a data-parallel step computes it: summed over the devices, transposed.
SUMMED_GRADIENT = f"""
func.func public @main(%dy: tensor<4x3xf32>, %x: tensor<4x5xf32>) -> tensor<5x3xf32> {{
  %0 = stablehlo.dot_general %dy, %x, contracting_dims = [0] x [0]
       : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %1 = "stablehlo.all_reduce"(%0) {SUM}
  %2 = stablehlo.transpose %1, dims = [1, 0] : (tensor<3x5xf32>) -> tensor<5x3xf32>
  return %2 : tensor<5x3xf32>
}}"""

# The same, but the summed gradient is also returned untransposed: nothing may change.
SUMMED_TWICE = f"""
func.func public @main(%dy: tensor<4x3xf32>, %x: tensor<4x5xf32>)
    -> (tensor<5x3xf32>, tensor<3x5xf32>) {{
  %0 = stablehlo.dot_general %dy, %x, contracting_dims = [0] x [0]
       : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %1 = "stablehlo.all_reduce"(%0) {SUM}
  %2 = stablehlo.transpose %1, dims = [1, 0] : (tensor<3x5xf32>) -> tensor<5x3xf32>
  return %2, %1 : tensor<5x3xf32>, tensor<3x5xf32>
}}"""

ONE_DEVICE = """
func.func public @main(%dy: tensor<4x3xf32>, %x: tensor<4x5xf32>) -> tensor<5x3xf32> {
  %0 = stablehlo.dot_general %dy, %x, contracting_dims = [0] x [0]
       : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<3x5xf32>) -> tensor<5x3xf32>
  return %1 : tensor<5x3xf32>
}"""


def _names(program) -> list[str]:
    return [op.name for op in program.main.body.entry.ops]


def _run_on_devices(program, inputs: list[list[np.ndarray]]) -> list[tuple]:
    plan = build_plan(program, RULES)
    count = len(inputs)
    launch = Launch("t", 1, count)
    results, errors = [None] * count, [None] * count

    def main(position):
        try:
            with running_as(launch.device(position)):
                results[position] = plan(*inputs[position])
            launch.finished(position)
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion below
            errors[position] = exc

    threads = [threading.Thread(target=main, args=(p,), daemon=True) for p in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert errors == [None] * count, errors
    return results


def test_a_dot_only_transposed_is_computed_with_its_operands_swapped(rng):
    program = load_program(ONE_DEVICE)
    swapped = swap_transposed_dots(program)
    assert _names(swapped) == ["stablehlo.dot_general", "func.return"]
    (dot,) = [op for op in walk_ops(swapped) if op.name == "stablehlo.dot_general"]
    assert [v.type.shape for v in dot.operands] == [(4, 5), (4, 3)]
    dy, x = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (4, 5)))
    (out,) = build_plan(swapped, RULES)(dy, x)
    np.testing.assert_allclose(out, (dy.T @ x).T, rtol=1e-6)


def test_a_summed_gradient_is_transposed_before_the_all_reduce(rng):
    program = load_program(SUMMED_GRADIENT, num_partitions=2, num_replicas=1)
    swapped = swap_transposed_dots(program)
    assert _names(swapped) == ["stablehlo.dot_general", "stablehlo.all_reduce", "func.return"]
    dot, reduce = swapped.main.body.entry.ops[:2]
    assert [v.type.shape for v in dot.operands] == [(4, 5), (4, 3)]
    assert reduce.operands == dot.results and reduce.results[0].type.shape == (5, 3)
    assert len(reduce.regions) == 1  # the reduction body is kept
    inputs = [[rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (4, 5))]
              for _ in range(2)]
    expected = sum(dy.T @ x for dy, x in inputs).T
    for (out,) in _run_on_devices(swapped, inputs):
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_a_summed_gradient_read_untransposed_too_is_left_alone():
    program = load_program(SUMMED_TWICE, num_partitions=2, num_replicas=1)
    assert swap_transposed_dots(program) is program
