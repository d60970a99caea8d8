"""The cpu backend's lowering registry; every rule module registers into ``RULES``."""
import ml_dtypes
import numpy as np

from pjrtkit.lowering.registry import LoweringRegistry

CPU_DTYPES = (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, ml_dtypes.bfloat16, np.float32, np.float64,
)

RULES = LoweringRegistry("pjrtkit_cpu", dtypes=CPU_DTYPES)
