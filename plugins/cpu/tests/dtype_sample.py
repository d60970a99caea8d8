"""The dtypes the cpu plugin's per-dtype sweeps run on in ``make test``: bool, a narrow signed and
a wide unsigned integer, bfloat16 (computed through float32) and float32; ``make test-long``
(which CI runs) runs every other dtype of each sweep."""
import numpy as np
import pytest

FAST = frozenset({"bool", "int8", "uint64", "bfloat16", "float32"})


def sampled(dtypes) -> list:
    """``dtypes`` as parametrize values, those outside ``FAST`` marked ``long`` (same ids)."""
    return [pytest.param(d, marks=() if np.dtype(d).name in FAST else pytest.mark.long)
            for d in dtypes]
