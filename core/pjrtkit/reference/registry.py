"""``REFERENCE``: the reference rule set, XLA's semantics as NumPy kernels, that every module of
this package registers into and that a backend merges into its own registry."""
import ml_dtypes
import numpy as np

from pjrtkit.lowering.registry import LoweringRegistry
from pjrtkit.reference.payloads import NUMPY_PAYLOADS

# The dtypes the reference kernels implement (as TensorType.dtype spells them).
REFERENCE_DTYPES = tuple(np.dtype(d) for d in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, ml_dtypes.bfloat16, np.float32, np.float64,
))

REFERENCE = LoweringRegistry("reference", dtypes=REFERENCE_DTYPES, payloads=NUMPY_PAYLOADS)
