"""NumPy arrays as payloads: how the plan builder makes, folds and checks the reference kernels'
values (``pjrtkit.lowering.payloads.Payloads`` for NumPy)."""
from __future__ import annotations

import numpy as np

from pjrtkit.lowering.payloads import Payloads

# Folded values live as long as the plan; larger results are computed at run time instead.
FOLD_LIMIT_BYTES = 1 << 20


def frozen(array: np.ndarray) -> np.ndarray:
    """``array``, made read-only: a value kept for every call must never be written."""
    array.flags.writeable = False
    return array


class NumpyPayloads(Payloads):
    """Payloads that are NumPy arrays (ml_dtypes for bf16 and narrower floats)."""

    def make_constant(self, value, type):
        # One owned, read-only array of the declared shape and dtype (a splat is expanded).
        value = np.asarray(value)
        return frozen(np.array(np.broadcast_to(value, type.shape), dtype=type.dtype))

    def fold(self, kernel, inputs):
        """Run the kernel now (XLA semantics: NumPy's float warnings are noise); keep results
        up to ``FOLD_LIMIT_BYTES`` of owned data, read-only."""
        with np.errstate(all="ignore"):
            results = tuple(np.asarray(r) for r in kernel(*inputs))
        owned = sum(r.nbytes for r in results if r.base is None)
        if owned > FOLD_LIMIT_BYTES:
            return None
        for r in results:
            if r.flags.writeable:
                r.flags.writeable = False
        return results

    def describe(self, payload):
        array = np.asarray(payload)
        return array.shape, array.dtype


NUMPY_PAYLOADS = NumpyPayloads()
