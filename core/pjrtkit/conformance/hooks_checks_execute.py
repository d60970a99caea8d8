"""Layer 2, compile and execute: a program in, outputs of the declared shapes and dtypes out;
an op or dtype the backend lacks is UNIMPLEMENTED at compile time, never at execute time.

Split from ``hooks_checks``; the runner imports every ``hooks_checks*`` module of the layer.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.errors import ErrorCode, PjrtError
from pjrtkit.conformance.checks import Failed, Skipped, check, expect
from pjrtkit.conformance.hooks_support import (LAYER, as_host, bits, client_topology,
                                                       compile_needing, compile_text,
                                                       declared_dtypes, execute, expect_result,
                                                       first_device)
from pjrtkit.types import CostEstimate

# ---- compile and execute ----------------------------------------------------------------------

ADD_F32 = """
func.func public @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.add %a, %b : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
"""

TWO_OUTPUTS = """
func.func public @main(%a: tensor<4x3xi32>) -> (tensor<3xi32>, tensor<4x3xf64>) {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %sum = stablehlo.reduce(%a init: %zero) applies stablehlo.add across dimensions = [0]
      : (tensor<4x3xi32>, tensor<i32>) -> tensor<3xi32>
  %f = stablehlo.convert %a : (tensor<4x3xi32>) -> tensor<4x3xf64>
  return %sum, %f : tensor<3xi32>, tensor<4x3xf64>
}
"""

EDGE_SHAPES = """
func.func public @main(%s: tensor<f32>, %z: tensor<0x4xf32>) -> (tensor<f32>, tensor<0x4xf32>) {
  %0 = stablehlo.multiply %s, %s : tensor<f32>
  %1 = stablehlo.negate %z : tensor<0x4xf32>
  return %0, %1 : tensor<f32>, tensor<0x4xf32>
}
"""

WHILE_LOOP = """
func.func public @main(%n: tensor<i32>) -> tensor<i32> {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %r:2 = stablehlo.while(%i = %zero, %acc = %zero) : tensor<i32>, tensor<i32>
    cond {
      %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %i1 = stablehlo.add %i, %one : tensor<i32>
      %a1 = stablehlo.add %acc, %i1 : tensor<i32>
      stablehlo.return %i1, %a1 : tensor<i32>, tensor<i32>
    }
  return %r#1 : tensor<i32>
}
"""

UNKNOWN_CUSTOM_CALL = """
func.func public @main(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.custom_call @pjrtkit_conformance_no_such_target(%a)
      : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
"""


def _add_inputs():
    a = np.arange(6, dtype=np.float32).reshape(2, 3) * np.float32(0.5)
    b = np.full((2, 3), 1.25, np.float32)
    return a, b


@check("hooks.compile.compiled_program", layer=LAYER)
def compile_compiled_program(backend):
    """pjrtkit_compile returns a CompiledProgram with an executable (an object with execute), a
    non-negative CostEstimate and non-negative sizes"""
    compiled = compile_text(backend, ADD_F32, first_device(backend))
    expect(callable(getattr(compiled.executable, "execute", None)),
           "CompiledProgram.executable has an execute(arguments, devices) method",
           expected="a PluginExecutable", actual=type(compiled.executable).__name__)
    expect(isinstance(compiled.cost, CostEstimate), "CompiledProgram.cost is a CostEstimate",
           expected="CostEstimate", actual=type(compiled.cost).__name__)
    for field in ("flops", "bytes_accessed", "transcendentals"):
        value = getattr(compiled.cost, field)
        expect(value >= 0, f"cost.{field} >= 0", expected=">= 0", actual=value)
    expect(compiled.code_size_bytes >= 0 and compiled.temp_bytes >= 0,
           "code_size_bytes and temp_bytes are >= 0", expected=">= 0",
           actual=(compiled.code_size_bytes, compiled.temp_bytes))


@check("hooks.execute.elementwise", layer=LAYER)
def execute_elementwise(backend):
    """an executed add returns one f32[2,3] output with the right values"""
    device = first_device(backend)
    a, b = _add_inputs()
    (out,) = execute(backend, compile_text(backend, ADD_F32, device), device, (a, b), 1)
    expect_result(out, a + b, "add")


# What TWO_OUTPUTS and WHILE_LOOP need: a backend that does not declare these runs the rest.
TWO_OUTPUTS_NEEDS = dict(ops=("stablehlo.constant", "stablehlo.reduce", "stablehlo.add",
                              "stablehlo.convert"), dtypes=("int32", "float64"))
WHILE_LOOP_NEEDS = dict(ops=("stablehlo.constant", "stablehlo.while", "stablehlo.compare",
                             "stablehlo.add"), dtypes=("int32", "bool"))


@check("hooks.execute.multiple_outputs", layer=LAYER, mandatory=False,
       capability="reduce and convert on int32/float64")
def execute_multiple_outputs(backend):
    """a program with two outputs of different shapes and dtypes (reduce, convert) returns both,
    in order"""
    device = first_device(backend)
    a = np.arange(12, dtype=np.int32).reshape(4, 3) - 5
    compiled = compile_needing(backend, TWO_OUTPUTS, device, **TWO_OUTPUTS_NEEDS)
    sums, f = execute(backend, compiled, device, (a,), 2)
    expect_result(sums, a.sum(axis=0, dtype=np.int32), "reduce output")
    expect_result(f, a.astype(np.float64), "convert output")


@check("hooks.execute.scalar_and_zero_size", layer=LAYER)
def execute_scalar_and_zero_size(backend):
    """scalars and zero-size arrays go through execute with their shapes"""
    device = first_device(backend)
    s, z = np.array(3.0, np.float32), np.zeros((0, 4), np.float32)
    out_s, out_z = execute(backend, compile_text(backend, EDGE_SHAPES, device), device, (s, z), 2)
    expect_result(out_s, s * s, "scalar output")
    expect_result(out_z, -z, "zero-size output")


@check("hooks.execute.control_flow", layer=LAYER, mandatory=False,
       capability="stablehlo.while")
def execute_control_flow(backend):
    """a stablehlo.while loop runs its body until the condition fails"""
    device = first_device(backend)
    compiled = compile_needing(backend, WHILE_LOOP, device, **WHILE_LOOP_NEEDS)
    (out,) = execute(backend, compiled, device,
                      (np.array(10, np.int32),), 1)
    expect_result(out, np.array(55, np.int32), "sum 1..10")


@check("hooks.execute.inputs_unchanged", layer=LAYER)
def execute_inputs_unchanged(backend):
    """execute leaves its (not donated) input payloads unchanged"""
    device = first_device(backend)
    kind = device.default_memory_kind
    a, b = _add_inputs()
    compiled = compile_text(backend, ADD_F32, device)
    payloads = [backend.transfer_to_device(array=x.copy(), device=device, memory_kind=kind)
                for x in (a, b)]
    compiled.executable.execute([payloads], (device,))
    for name, x, p in zip("ab", (a, b), payloads):
        host = as_host(backend, p, device, kind)
        expect(bits(host) == bits(x), f"input {name} is unchanged after execute",
               expected=x.ravel().tolist(), actual=host.ravel().tolist())


@check("hooks.execute.repeatable", layer=LAYER)
def execute_repeatable(backend):
    """one executable runs many times with different inputs and answers each correctly"""
    device = first_device(backend)
    compiled = compile_text(backend, ADD_F32, device)
    for k in range(3):
        a, b = _add_inputs()
        a = a * np.float32(k + 1)
        (out,) = execute(backend, compiled, device, (a, b), 1)
        expect_result(out, a + b, f"run {k}")


@check("hooks.execute.every_device", layer=LAYER)
def execute_every_device(backend):
    """a program compiled for each device runs there"""
    topology = client_topology(backend)
    for device in topology.devices:
        a, b = _add_inputs()
        (out,) = execute(backend, compile_text(backend, ADD_F32, device), device, (a, b), 1)
        expect_result(out, a + b, f"add on device {device.id}")


@check("hooks.compile.unsupported_op", layer=LAYER)
def compile_unsupported_op(backend):
    """an op the backend lacks (a custom_call to an unknown target) is UNIMPLEMENTED at compile
    time, not at execute time"""
    device = first_device(backend)
    try:
        compiled = compile_text(backend, UNKNOWN_CUSTOM_CALL, device)
    except PjrtError as exc:
        expect(exc.code == ErrorCode.UNIMPLEMENTED, "an unknown custom_call target is "
               "UNIMPLEMENTED at compile", expected="UNIMPLEMENTED", actual=exc.code.name)
        expect("pjrtkit_conformance_no_such_target" in str(exc) or "custom_call" in str(exc),
               "the error names the op or target", expected="custom_call / target name",
               actual=str(exc))
        return str(exc)[:160]
    where = "at compile"
    try:
        execute(backend, compiled, device, (np.zeros((2, 3), np.float32),), 1)
    except PjrtError as exc:
        where = f"at execute ({exc.code.name})"
    raise Failed("an unknown custom_call target is UNIMPLEMENTED at compile",
                 expected="UNIMPLEMENTED from pjrtkit_compile",
                 actual=f"compiled; failed {where}" if where != "at compile"
                 else "compiled and executed")


@check("hooks.compile.undeclared_dtype", layer=LAYER)
def compile_undeclared_dtype(backend):
    """a program on a dtype the backend does not declare is UNIMPLEMENTED at compile naming the
    dtype"""
    declared = declared_dtypes(backend)
    if declared is None:
        raise Skipped("the backend declares no dtypes (Capabilities.dtypes from "
                      "pjrtkit_capabilities is None)")
    missing = [d for d in (np.dtype(np.complex64), np.dtype(np.complex128), np.dtype(np.int64),
                           np.dtype(np.float64)) if d not in declared]
    if not missing:
        raise Skipped("the backend declares every dtype this check can write a program for")
    dtype = missing[0]
    mlir_type = {"complex64": "complex<f32>", "complex128": "complex<f64>", "int64": "i64",
                 "float64": "f64"}[dtype.name]
    text = (f"func.func public @main(%a: tensor<2x{mlir_type}>) -> tensor<2x{mlir_type}> {{\n"
            f"  %0 = stablehlo.add %a, %a : tensor<2x{mlir_type}>\n"
            f"  return %0 : tensor<2x{mlir_type}>\n}}\n")
    try:
        compile_text(backend, text, first_device(backend))
    except PjrtError as exc:
        expect(exc.code == ErrorCode.UNIMPLEMENTED, f"add on undeclared {dtype} is UNIMPLEMENTED",
               expected="UNIMPLEMENTED", actual=exc.code.name)
        return str(exc)[:160]
    raise Failed(f"add on undeclared dtype {dtype} is UNIMPLEMENTED at compile",
                 expected="UNIMPLEMENTED", actual="compiled")


@check("hooks.compile.deterministic", layer=LAYER, mandatory=False,
       capability="reduce and convert on int32/float64")
def compile_deterministic(backend):
    """two compiles of one program give executables that compute the same results"""
    device = first_device(backend)
    a = np.arange(12, dtype=np.int32).reshape(4, 3)
    first = execute(backend, compile_needing(backend, TWO_OUTPUTS, device,
                                             **TWO_OUTPUTS_NEEDS), device, (a,), 2)
    second = execute(backend, compile_needing(backend, TWO_OUTPUTS, device,
                                              **TWO_OUTPUTS_NEEDS), device, (a,), 2)
    for x, y in zip(first, second):
        expect(bits(x) == bits(y), "results of two compiles agree", expected=x.tolist(),
               actual=y.tolist())


