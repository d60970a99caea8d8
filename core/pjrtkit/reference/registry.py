"""``REFERENCE``: the reference rule set, XLA's semantics as NumPy kernels, that every module of
this package registers into and that a backend merges into its own registry."""
from pjrtkit.lowering.registry import LoweringRegistry
from pjrtkit.semantics import dtypes
from pjrtkit.reference.payloads import NUMPY_PAYLOADS

# The dtypes the reference kernels implement (as TensorType.dtype spells them): every PJRT
# buffer type ml_dtypes can hold.
REFERENCE_DTYPES = dtypes.ALL

REFERENCE = LoweringRegistry("reference", dtypes=REFERENCE_DTYPES, payloads=NUMPY_PAYLOADS)
