"""The tpu backend's lowering registry: the cpu plugin's rules (imported, not copied), limited to
the element types it runs as a TPU. A program with any other type (float64, complex128, int2,
the float8 types beyond e4m3fn/e4m3b11fnuz/e5m2, float4: JAX makes float64 and complex128 with
``jax_enable_x64``) is UNIMPLEMENTED at compile time naming the op and the type.

Checked against libtpu 0.0.42.1's compile-only compile: it compiles int64/uint64 (emulated on
32-bit units) and so does this backend, exactly; JAX's RNG makes uint64 iotas even with x64
off, so refusing them would refuse jax.random. libtpu also compiles float64 and complex128
(emulated); this backend refuses them on purpose: JAX's TPU test configuration treats them as
unsupported, and the emulation's numerics are not modelled here. libtpu aborts on int2."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from pjrtkit.errors import Unimplemented

from pjrtkit_cpu.lowering import RULES as CPU_RULES

# JAX's test_util.supported_dtypes() for device tag tpu (HARDWARE_NOTES.md), plus the 64-bit
# integers libtpu compiles.
TPU_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, ml_dtypes.int4, np.int8, np.int16, np.int32, np.int64,
    ml_dtypes.uint4, np.uint8, np.uint16, np.uint32, np.uint64,
    ml_dtypes.bfloat16, np.float16, np.float32, np.complex64,
    ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3b11fnuz, ml_dtypes.float8_e5m2,
))

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
