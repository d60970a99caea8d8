"""The tpu backend's lowering registry: the cpu plugin's rules (imported, not copied), limited to
the element types it runs as a TPU. A program with any other type (float64, complex128, int2,
uint2: JAX makes float64 and complex128 with ``jax_enable_x64``) is UNIMPLEMENTED at compile
time naming the op and the type.

Checked against libtpu 0.0.42.1's compile-only compile (add, mul, converts, sum, dot, max and
exp of an (8, 128) array of each type, on a v5e device):
- it compiles int64/uint64 (emulated on 32-bit units) and so does this backend, exactly; JAX's
  RNG makes uint64 iotas even with x64 off, so refusing them would refuse jax.random;
- it compiles every float8 type and float4_e2m1fn, and so does this backend, with XLA's CPU
  numerics (JAX's own supported_dtypes() for tpu lists only e4m3fn, e4m3b11fnuz and e5m2, which
  is narrower than libtpu);
- it compiles float64 and complex128 (emulated; it aborts converting float32 to complex128);
  this backend refuses them on purpose: the TPU numerics issue names them as types a TPU lacks,
  JAX's TPU test configuration treats them as unsupported, and the emulation's numerics are not
  modelled here;
- it rejects int2/uint2 (INVALID_ARGUMENT for small shapes, an abort converting them to float32)
  and so does this backend. It also rejects a sum of int4/uint4, which this backend runs."""
from __future__ import annotations

import numpy as np

from pjrtkit.errors import Unimplemented
from pjrtkit.semantics import dtypes as D

from pjrtkit_cpu.lowering import RULES as CPU_RULES

# JAX's test_util.supported_dtypes() for device tag tpu (HARDWARE_NOTES.md), plus the 64-bit
# integers and the float8/float4 types libtpu compiles.
TPU_DTYPES = frozenset(D.ALL) - {D.by_name(n) for n in ("int2", "uint2", "float64",
                                                      "complex128")}

RULES = CPU_RULES.merged({}, backend="pjrtkit_tpu", dtypes=TPU_DTYPES)


def _unsupported(values) -> np.dtype | None:
    for value in values:
        dtype = getattr(value.type, "dtype", None)
        if dtype is not None and dtype not in TPU_DTYPES:
            return dtype
    return None


def check_tpu_dtypes(program) -> None:
    """UNIMPLEMENTED naming the first op that computes on a type a TPU lacks (constants are
    passed over: they only feed such an op) and the type; the plan builder's own check still
    catches a program made of constants alone."""
    from pjrtkit.stablehlo.ir import walk_ops

    for op in walk_ops(program):
        if op.name == "stablehlo.constant":
            continue
        dtype = _unsupported((*op.operands, *op.results))
        if dtype is not None:
            raise Unimplemented(
                f"pjrtkit_tpu: {op.name} on {dtype.name} is not supported: a TPU has no "
                f"{dtype.name} unit ({op.describe()}). JAX makes float64 and complex128 only "
                f"with jax_enable_x64; use float32/complex64 (or bfloat16) on a TPU")
