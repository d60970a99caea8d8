"""Layer 2, compile and execute: a program in, outputs of the declared shapes and dtypes out;
an op or dtype the backend lacks is UNIMPLEMENTED at compile time, never at execute time.

Split from ``hooks_checks`` (which imports this module so its checks register with the rest).
"""
from __future__ import annotations

import numpy as np

from pjrtkit.errors import ErrorCode, PjrtError
from pjrtkit.testing.conformance.checks import Failed, Skipped, check, expect
from pjrtkit.testing.conformance.hooks_checks import (LAYER, _as_host, _bits, _compile,
                                                      _device, _execute, _expect_result,
                                                      _topology, declared_dtypes)
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
    """pjrtkit_compile returns a CompiledProgram with an executable, a non-negative
    CostEstimate and non-negative sizes"""
    compiled = _compile(backend, ADD_F32, _device(backend))
    expect(compiled.executable is not None, "CompiledProgram.executable is set",
           expected="an executable", actual=None)
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
    device = _device(backend)
    a, b = _add_inputs()
    (out,) = _execute(backend, _compile(backend, ADD_F32, device), device, (a, b), 1)
    _expect_result(out, a + b, "add")


@check("hooks.execute.multiple_outputs", layer=LAYER)
def execute_multiple_outputs(backend):
    """a program with two outputs of different shapes and dtypes (reduce, convert) returns both,
    in order"""
    device = _device(backend)
    a = np.arange(12, dtype=np.int32).reshape(4, 3) - 5
    sums, f = _execute(backend, _compile(backend, TWO_OUTPUTS, device), device, (a,), 2)
    _expect_result(sums, a.sum(axis=0, dtype=np.int32), "reduce output")
    _expect_result(f, a.astype(np.float64), "convert output")


@check("hooks.execute.scalar_and_zero_size", layer=LAYER)
def execute_scalar_and_zero_size(backend):
    """scalars and zero-size arrays go through execute with their shapes"""
    device = _device(backend)
    s, z = np.array(3.0, np.float32), np.zeros((0, 4), np.float32)
    out_s, out_z = _execute(backend, _compile(backend, EDGE_SHAPES, device), device, (s, z), 2)
    _expect_result(out_s, s * s, "scalar output")
    _expect_result(out_z, -z, "zero-size output")


@check("hooks.execute.control_flow", layer=LAYER)
def execute_control_flow(backend):
    """a stablehlo.while loop runs its body until the condition fails"""
    device = _device(backend)
    (out,) = _execute(backend, _compile(backend, WHILE_LOOP, device), device,
                      (np.array(10, np.int32),), 1)
    _expect_result(out, np.array(55, np.int32), "sum 1..10")


@check("hooks.execute.inputs_unchanged", layer=LAYER)
def execute_inputs_unchanged(backend):
    """execute leaves its (not donated) input payloads unchanged"""
    device = _device(backend)
    kind = device.default_memory_kind
    a, b = _add_inputs()
    compiled = _compile(backend, ADD_F32, device)
    payloads = [backend.transfer_to_device(array=x.copy(), device=device, memory_kind=kind)
                for x in (a, b)]
    backend.execute(executable=compiled.executable, arguments=[payloads], devices=(device,))
    for name, x, p in zip("ab", (a, b), payloads):
        host = _as_host(backend, p, device, kind)
        expect(_bits(host) == _bits(x), f"input {name} is unchanged after execute",
               expected=x.ravel().tolist(), actual=host.ravel().tolist())


@check("hooks.execute.repeatable", layer=LAYER)
def execute_repeatable(backend):
    """one executable runs many times with different inputs and answers each correctly"""
    device = _device(backend)
    compiled = _compile(backend, ADD_F32, device)
    for k in range(3):
        a, b = _add_inputs()
        a = a * np.float32(k + 1)
        (out,) = _execute(backend, compiled, device, (a, b), 1)
        _expect_result(out, a + b, f"run {k}")


@check("hooks.execute.every_device", layer=LAYER)
def execute_every_device(backend):
    """a program compiled for each device runs there"""
    topology = _topology(backend)
    for device in topology.devices:
        a, b = _add_inputs()
        (out,) = _execute(backend, _compile(backend, ADD_F32, device), device, (a, b), 1)
        _expect_result(out, a + b, f"add on device {device.id}")


@check("hooks.compile.unsupported_op", layer=LAYER)
def compile_unsupported_op(backend):
    """an op the backend lacks (a custom_call to an unknown target) is UNIMPLEMENTED at compile
    time, not at execute time"""
    device = _device(backend)
    try:
        compiled = _compile(backend, UNKNOWN_CUSTOM_CALL, device)
    except PjrtError as exc:
        expect(exc.code == ErrorCode.UNIMPLEMENTED, "an unknown custom_call target is "
               "UNIMPLEMENTED at compile", expected="UNIMPLEMENTED", actual=exc.code.name)
        expect("pjrtkit_conformance_no_such_target" in str(exc) or "custom_call" in str(exc),
               "the error names the op or target", expected="custom_call / target name",
               actual=str(exc))
        return str(exc)[:160]
    where = "at compile"
    try:
        _execute(backend, compiled, device, (np.zeros((2, 3), np.float32),), 1)
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
        raise Skipped("the backend declares no dtypes (module DTYPES or lowering.RULES.dtypes)")
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
        _compile(backend, text, _device(backend))
    except PjrtError as exc:
        expect(exc.code == ErrorCode.UNIMPLEMENTED, f"add on undeclared {dtype} is UNIMPLEMENTED",
               expected="UNIMPLEMENTED", actual=exc.code.name)
        return str(exc)[:160]
    raise Failed(f"add on undeclared dtype {dtype} is UNIMPLEMENTED at compile",
                 expected="UNIMPLEMENTED", actual="compiled")


@check("hooks.compile.deterministic", layer=LAYER)
def compile_deterministic(backend):
    """two compiles of one program give executables that compute the same results"""
    device = _device(backend)
    a = np.arange(12, dtype=np.int32).reshape(4, 3)
    first = _execute(backend, _compile(backend, TWO_OUTPUTS, device), device, (a,), 2)
    second = _execute(backend, _compile(backend, TWO_OUTPUTS, device), device, (a,), 2)
    for x, y in zip(first, second):
        expect(_bits(x) == _bits(y), "results of two compiles agree", expected=x.tolist(),
               actual=y.tolist())


