"""The cpu backend's lowering registry: the reference rule set (``pjrtkit.reference``) with the
cpu's own rules on top, which every module of this package registers into ``RULES``."""
from pjrtkit.reference import REFERENCE, REFERENCE_DTYPES

# The cpu kernels are the reference kernels (plus overrides of the same semantics).
CPU_DTYPES = REFERENCE_DTYPES

RULES = REFERENCE.merged({}, backend="pjrtkit_cpu", dtypes=CPU_DTYPES)
