"""The tpu backend's lowering registry: the cpu plugin's rules (imported, not copied), limited to
the element types a TPU has. A program with any other type (float64, complex128, int64, uint64,
...: JAX makes them with ``jax_enable_x64``) is UNIMPLEMENTED at compile time naming the op and
the type, as on a TPU."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from pjrtkit.errors import Unimplemented

from pjrtkit_cpu.lowering import RULES as CPU_RULES

# JAX's test_util.supported_dtypes() for device tag tpu (HARDWARE_NOTES.md): no 64-bit types.
TPU_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, ml_dtypes.int4, np.int8, np.int16, np.int32,
    ml_dtypes.uint4, np.uint8, np.uint16, np.uint32,
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
                f"pjrtkit_tpu: {op.name} on {dtype.name} is not supported: TPUs have no "
                f"{dtype.name} ({op.describe()}). JAX makes 64-bit types only with "
                f"jax_enable_x64; use 32-bit types (or bfloat16) on a TPU")
