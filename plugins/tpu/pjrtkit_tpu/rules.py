"""The tpu backend's lowering registry: the cpu plugin's rules (imported, not copied), limited to
the element types a TPU has. A program with any other type (float64, complex128, int64, uint64,
...: JAX makes them with ``jax_enable_x64``) is UNIMPLEMENTED at compile time naming the op and
the type, as on a TPU."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from pjrtkit_cpu.lowering import RULES as CPU_RULES

# JAX's test_util.supported_dtypes() for device tag tpu (HARDWARE_NOTES.md): no 64-bit types.
TPU_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, ml_dtypes.int4, np.int8, np.int16, np.int32,
    ml_dtypes.uint4, np.uint8, np.uint16, np.uint32,
    ml_dtypes.bfloat16, np.float16, np.float32, np.complex64,
    ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3b11fnuz, ml_dtypes.float8_e5m2,
))

RULES = CPU_RULES.merged({}, backend="pjrtkit_tpu", dtypes=TPU_DTYPES)
