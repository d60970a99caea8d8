"""The one-device pass (pjrtkit.stablehlo.one_device): every Shardy op and attribute JAX emits,
GSPMD's sharding custom calls and collectives over one device become what they mean on one
device. Each annotated program is compared with the same program written without the
annotations: same ops after loading, same numbers from the cpu plugin's plan."""
from __future__ import annotations

import numpy as np
import pytest

from pjrtkit.errors import InvalidArgument, Unimplemented
from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.stablehlo.loader import load_program, parse_program
from pjrtkit.stablehlo.one_device import resolve_for_one_device

MESH = 'sdy.mesh @mesh = <["i"=1]>\n'


def _module(body: str, mesh: str = MESH, partitions: int = 1, replicas: int = 1) -> str:
    return (f"module @m attributes {{mhlo.num_partitions = {partitions} : i32, "
            f"mhlo.num_replicas = {replicas} : i32}} {{\n{mesh}"
            "func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
            f"{body}\n}}\n}}")


PLAIN = """  %y = stablehlo.add %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>"""

ANNOTATED = {
    "sharding_constraint": """
  %a = sdy.sharding_constraint %x <@mesh, [{"i"}]> : tensor<4xf32>
  %y = stablehlo.add %a, %a : tensor<4xf32>
  return %y : tensor<4xf32>""",
    "reshard+propagation_barrier": """
  %a = sdy.reshard %x <@mesh, [{}]> : tensor<4xf32>
  %b = sdy.propagation_barrier %a allowed_direction=NONE : tensor<4xf32>
  %y = stablehlo.add %b, %a : tensor<4xf32>
  return %y : tensor<4xf32>""",
    "sharding_group": """
  sdy.sharding_group %x group_id=0 : tensor<4xf32>
  %y = stablehlo.add %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>""",
    "manual_computation": """
  %y = sdy.manual_computation(%x) in_shardings=[<@mesh, [{"i"}]>]
      out_shardings=[<@mesh, [{"i"}]>] manual_axes={"i"} (%l: tensor<4xf32>) {
    %s = stablehlo.add %l, %l : tensor<4xf32>
    sdy.return %s : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>""",
    "named_computation-nested": """
  %y = sdy.named_computation<"outer">(%x) (%o: tensor<4xf32>) {
    %c = sdy.sharding_constraint %o <@mesh, [{}]> : tensor<4xf32>
    %n = sdy.named_computation<"inner">(%c) (%i: tensor<4xf32>) {
      %s = stablehlo.add %i, %i : tensor<4xf32>
      sdy.return %s : tensor<4xf32>
    } : (tensor<4xf32>) -> tensor<4xf32>
    sdy.return %n : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>""",
    "gspmd-custom-calls": """
  %a = stablehlo.custom_call @Sharding(%x) {mhlo.sharding = "{replicated}"}
      : (tensor<4xf32>) -> tensor<4xf32>
  %b = stablehlo.custom_call @SPMDFullToShardShape(%a) {mhlo.sharding = "{manual}"}
      : (tensor<4xf32>) -> tensor<4xf32>
  %c = stablehlo.custom_call @SPMDShardToFullShape(%b) {mhlo.sharding = "{replicated}"}
      : (tensor<4xf32>) -> tensor<4xf32>
  %y = stablehlo.add %c, %c : tensor<4xf32>
  return %y : tensor<4xf32>""",
    "all_reduce-over-one-device": """
  %r = "stablehlo.all_reduce"(%x) <{replica_groups = dense<0> : tensor<1x1xi64>}> ({
  ^bb0(%p: tensor<f32>, %q: tensor<f32>):
    %t = stablehlo.add %p, %q : tensor<f32>
    %u = sdy.sharding_constraint %t <@mesh, []> : tensor<f32>
    stablehlo.return %u : tensor<f32>
  }) : (tensor<4xf32>) -> tensor<4xf32>
  %y = stablehlo.add %r, %x : tensor<4xf32>
  return %y : tensor<4xf32>""",
    "collective_permute-to-itself": """
  %r = "stablehlo.collective_permute"(%x) <{source_target_pairs = dense<0> : tensor<1x2xi64>}>
      : (tensor<4xf32>) -> tensor<4xf32>
  %y = stablehlo.add %r, %r : tensor<4xf32>
  return %y : tensor<4xf32>""",
}


def _structure(program):
    return [(op.name, [v.type for v in op.operands], [v.type for v in op.results])
            for op in walk_ops(program)]


def _run(program, x):
    from pjrtkit_cpu.lowering import RULES
    return build_plan(program, RULES)(x)


@pytest.mark.parametrize("case", list(ANNOTATED))
def test_annotations_are_identities_on_one_device(case):
    annotated = load_program(_module(ANNOTATED[case]))
    plain = load_program(_module(PLAIN))
    assert not [op.name for op in walk_ops(annotated) if op.name.startswith("sdy.")]
    assert _structure(annotated) == _structure(plain)
    x = np.arange(4, dtype=np.float32) - 1.5
    np.testing.assert_array_equal(_run(annotated, x)[0], _run(plain, x)[0])


def test_sdy_constant_becomes_a_stablehlo_constant():
    program = load_program(_module("""
  %c = sdy.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %y = stablehlo.add %x, %c : tensor<4xf32>
  return %y : tensor<4xf32>"""))
    (constant,) = [op for op in walk_ops(program) if op.name == "stablehlo.constant"]
    np.testing.assert_array_equal(constant.attributes["value"], [1, 2, 3, 4])


def _manual_over_two_devices() -> str:
    """shard_map over a mesh of 2: the body sees 2 of the 4 elements."""
    return _module(ANNOTATED["manual_computation"].replace(
        "(%l: tensor<4xf32>)", "(%l: tensor<2xf32>)").replace(
        "%s = stablehlo.add %l, %l : tensor<4xf32>", "%s = stablehlo.add %l, %l : tensor<2xf32>"
    ).replace("sdy.return %s : tensor<4xf32>", "sdy.return %s : tensor<2xf32>"),
        mesh='sdy.mesh @mesh = <["i"=2]>\n', partitions=2)


def test_a_program_for_several_partitions_is_left_for_the_partitioner():
    names = [op.name for op in walk_ops(load_program(_manual_over_two_devices()))]
    assert "sdy.manual_computation" in names


def test_a_program_for_several_devices_compiled_for_one_is_invalid():
    with pytest.raises(InvalidArgument, match="on one device they must agree"):
        load_program(_manual_over_two_devices(), num_partitions=1)


def test_collectives_stay_when_there_are_several_replicas():
    text = _module(ANNOTATED["all_reduce-over-one-device"], replicas=2)
    names = [op.name for op in walk_ops(load_program(text))]
    assert "stablehlo.all_reduce" in names and "sdy.sharding_constraint" not in names


def test_collective_permute_to_another_device_is_left_for_the_plugin():
    text = _module(ANNOTATED["collective_permute-to-itself"].replace(
        "dense<0> : tensor<1x2xi64>", "dense<[[0, 1]]> : tensor<1x2xi64>"))
    assert "stablehlo.collective_permute" in [op.name for op in walk_ops(load_program(text))]


def test_an_unknown_sdy_op_is_unimplemented_naming_it():
    program = parse_program(_module(ANNOTATED["sharding_constraint"]))
    (op,) = [op for op in walk_ops(program) if op.name == "sdy.sharding_constraint"]
    op.name = "sdy.some_future_op"
    with pytest.raises(Unimplemented, match="sdy.some_future_op"):
        resolve_for_one_device(program)
