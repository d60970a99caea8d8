"""The core's partitioner (pjrtkit.stablehlo.partition): XLA's SPMD partitioner turns a global
program into the per-device one, with the shardings jaxlib reads; results are cached by program
and options; a program XLA refuses is INVALID_ARGUMENT naming it."""
from __future__ import annotations

import pytest

from pjrtkit import jax_compat
from pjrtkit.errors import InvalidArgument
from pjrtkit.stablehlo import partition
from pjrtkit.stablehlo.ir import TensorType, walk_ops

GLOBAL_PROGRAM = """
module @jit_f attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]>
  func.func public @main(%arg0: tensor<8x3xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>})
      -> (tensor<3xf32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.maximum across dimensions = [0]
        : (tensor<8x3xf32>, tensor<f32>) -> tensor<3xf32>
    return %0 : tensor<3xf32>
  }
}
"""


def _options(num_partitions: int) -> bytes:
    xc = jax_compat.xla_client()
    options = xc.CompileOptions()
    options.num_partitions = num_partitions
    build = options.executable_build_options
    build.num_partitions = num_partitions
    build.num_replicas = 1
    build.use_spmd_partitioning = True
    build.use_shardy_partitioner = True
    return options.SerializeAsString()


def test_a_global_program_becomes_the_per_device_program_with_its_shardings():
    code = jax_compat.serialize_portable_artifact(GLOBAL_PROGRAM)
    program, bytecode = partition.partitioned_program(
        code, _options(4), num_replicas=1, num_partitions=4, isolated=False)
    assert program.main.arguments[0].type == TensorType((2, 3), program.main.arguments[0].type.dtype)
    names = {op.name for op in walk_ops(program)}
    assert "stablehlo.all_reduce" in names, names  # the max over the sharded rows
    assert program.attributes["mhlo.spmd_parameters_shardings"] == ("{devices=[4,1]<=[4]}",)
    assert program.attributes["mhlo.spmd_output_sharding"] == "{replicated}"
    assert bytecode.startswith(b"ML\xefR")  # MLIR bytecode, what OptimizedProgram answers


# What JAX lowers for jit(lambda a: (a * 2, a + 1), donate_argnums=0, out_shardings=(... in
# pinned_host, ... in device)) over 4 devices.
MARKED_PROGRAM = """
module @jit_f attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]>
  func.func public @main(%arg0: tensor<8x3xf32> {mhlo.memory_kind = "device",
      sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>, tf.aliasing_output = 1 : i32})
      -> (tensor<8x3xf32> {jax.result_info = "result[0]", mhlo.memory_kind = "pinned_host",
                           sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>},
          tensor<8x3xf32> {jax.result_info = "result[1]", mhlo.memory_kind = "device",
                           sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) {
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<8x3xf32>
    %0 = stablehlo.multiply %arg0, %cst : tensor<8x3xf32>
    %1 = stablehlo.add %arg0, %cst : tensor<8x3xf32>
    %2 = stablehlo.custom_call @annotate_device_placement(%0) {backend_config = "",
        has_side_effect = true, mhlo.frontend_attributes = {_xla_buffer_placement = "pinned_host"}}
        : (tensor<8x3xf32>) -> tensor<8x3xf32>
    %3 = stablehlo.custom_call @annotate_device_placement(%1) {backend_config = "",
        has_side_effect = true, mhlo.frontend_attributes = {_xla_buffer_placement = "device"}}
        : (tensor<8x3xf32>) -> tensor<8x3xf32>
    return %2, %3 : tensor<8x3xf32>, tensor<8x3xf32>
  }
}
"""


def test_the_per_device_program_keeps_donations_and_output_memory_kinds():
    # XLA's partitioner drops both from its output; the runtime reads them from the program
    code = jax_compat.serialize_portable_artifact(MARKED_PROGRAM)
    program, _ = partition.partitioned_program(code, _options(4), num_replicas=1,
                                               num_partitions=4, isolated=False)
    main = program.main
    assert [a.type.shape for a in main.arguments] == [(2, 3)]
    assert main.arg_attributes[0].get("jax.buffer_donor") is True
    assert [attrs.get("mhlo.memory_kind") for attrs in main.result_attributes] == [
        "pinned_host", "device"]


def test_a_second_partitioning_of_the_same_program_is_served_from_the_cache(monkeypatch):
    code = jax_compat.serialize_portable_artifact(GLOBAL_PROGRAM.replace("8x3", "12x3"))
    compiles = []
    original = jax_compat.compile_with_hlo_dump
    monkeypatch.setattr(jax_compat, "compile_with_hlo_dump",
                        lambda *a: compiles.append(a) or original(*a))
    first, _ = partition.partitioned_program(code, _options(4), num_replicas=1,
                                             num_partitions=4, isolated=False)
    second, _ = partition.partitioned_program(code, _options(4), num_replicas=1,
                                              num_partitions=4, isolated=False)
    assert len(compiles) == 1
    assert first is not second  # each compile gets its own copy to rewrite
    assert [op.name for op in walk_ops(first)] == [op.name for op in walk_ops(second)]


def test_a_program_xla_refuses_is_invalid_argument_naming_it():
    with pytest.raises(InvalidArgument, match=r"XLA's SPMD partitioner could not partition "
                                              r"the program \(sha256 [0-9a-f]{12}"):
        partition.spmd_partition(b"not a program", _options(2), num_replicas=1,
                                 num_partitions=2)


def test_a_program_whose_partitioning_pass_fails_is_invalid_argument_not_run_unpartitioned():
    # XLA writes the module before optimizations, then its partitioner refuses a
    # side-effecting custom call without a placement: that module is the global program and
    # must not be taken for the per-device one (its shapes are the global ones).
    text = GLOBAL_PROGRAM.replace(
        "    return %0 : tensor<3xf32>",
        "    stablehlo.custom_call @some_effect(%0) {has_side_effect = true} : (tensor<3xf32>) "
        "-> ()\n    return %0 : tensor<3xf32>")
    code = jax_compat.serialize_portable_artifact(text)
    with pytest.raises(InvalidArgument, match="Side-effect HLO must have sharding"):
        partition.spmd_partition(code, _options(4), num_replicas=1, num_partitions=4)
