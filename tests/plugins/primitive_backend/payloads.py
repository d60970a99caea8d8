"""The payload (``Tensor``), the rule registry (``RULES``) and what every family's rules share.

A payload is whatever the backend keeps for one buffer; here a NumPy array wrapped in ``Tensor``,
which the core only passes around. ``TensorPayloads`` tells the plan builder how a constant
becomes one and what shape and dtype one has. ``RULES`` is the registry every family module
(``elementwise``, ``shape``, ``indexing``, ``reductions``, ``contraction``, ``control_flow``)
registers its rules in; ``kernel`` turns a function over arrays into one over Tensors.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from pjrtkit.expansions.formats import STORED_ONLY
from pjrtkit.lowering.payloads import Payloads
from pjrtkit.lowering.registry import LoweringRegistry
from pjrtkit.stablehlo.ir import TensorType

PLATFORM = "pjrtkit_primitive"
BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
INTS = tuple(np.dtype(f"{k}{n}") for k in "iu" for n in (1, 2, 4, 8))
FLOATS = (F16, BF16, F32, np.dtype(np.float64))
COMPUTED = (np.dtype(np.bool_), *INTS, *FLOATS)  # what the kernels compute on


class Tensor:
    """The payload: an array this backend owns. The core only passes it around."""

    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data


class TensorPayloads(Payloads):
    def make_constant(self, value, type):
        return Tensor(np.array(np.broadcast_to(np.asarray(value, type.dtype), type.shape)))

    def describe(self, payload):
        return payload.data.shape, payload.data.dtype


# Every PJRT type may be stored (the expansions read complex and narrow buffers as bytes).
RULES = LoweringRegistry(PLATFORM, dtypes=(*COMPUTED, *STORED_ONLY), payloads=TensorPayloads())


def kernel(fn):
    """A kernel over arrays, wrapped to take and return Tensors."""
    def run(*tensors):
        return tuple(Tensor(np.asarray(r)) for r in fn(*(t.data for t in tensors)))
    return run


def result_type(op, i=0) -> TensorType:
    return op.results[i].type
