"""The reference rule set: XLA's semantics as NumPy lowering rules, the base any backend builds on.

Each module here holds one family of ops (elementwise, shape, indexing, reduce, sort,
random_bits, dot, convolution, control_flow, composite) and registers its rules into
``REFERENCE`` on import; importing this package imports them all. A backend takes the whole
set and puts its own rules on top::

    from pjrtkit.reference import REFERENCE
    RULES = REFERENCE.merged({"stablehlo.dot_general": my_dot}, backend="pjrtkit_mine")

Its payloads are NumPy arrays (``payloads.NumpyPayloads``: how constants are made and folded).
To add an op, add its rule to the module of its family (or a new module here, picked up
automatically) with ``@REFERENCE.register("stablehlo.<op>")``: every backend that merges the
reference gets it. Kernels follow XLA's CPU backend exactly (rounding, integer wrap-around,
NaN and signed-zero rules), and the conformance suite compares them with it.
"""
import importlib
import pkgutil

from pjrtkit.reference.payloads import NUMPY_PAYLOADS, NumpyPayloads
from pjrtkit.reference.registry import REFERENCE, REFERENCE_DTYPES

# Every sibling module registers its rules on import; a new module is picked up automatically.
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("registry", "payloads"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["REFERENCE", "REFERENCE_DTYPES", "NUMPY_PAYLOADS", "NumpyPayloads"]
