"""Where a value lives in generated code, and the formatting every driver shares.

One description of a value's home in a generated Numba function, for every driver:

- ``array``: a flat C-contiguous array argument or buffer, read at the loop's flat index (a
  fused group's ``full`` input kind; a native loop's carries, captures, constants and
  per-iteration buffers, Val kind ``array``);
- ``broadcast``: an array of lower rank read with stride 0 along the dimensions it repeats
  (a fused group's absorbed ``broadcast_in_dim``, input kind ``broadcast``);
- ``strided``: an array read with other element strides (a fused group's absorbed transpose,
  input kind ``strided``);
- ``scalar``: one Numba local or expression standing for every element, read once outside the
  innermost loop (rank-0 values: input kind ``scalar``, Val kind ``scalar``; a value of any
  shape whose elements are all one scalar: Val kind ``splat``, so ops on it run once);
- ``literal``: a constant folded into the code by ``literal`` below (a fused group's
  ``literals``, a native loop's uniform constants and iotas of one element);
- ``per_row``: a local holding one row's element, set once per row (row programs' statistics
  and a stage's per-row inputs, source ``local``);
- ``row_buffer``: a buffer holding the current row of a full-shape value another stage reads
  (row programs, source ``rowbuf``);
- ``carry``: a native loop's carried value: an array updated in place at the end of each
  iteration, or a local for a rank-0 carry.

The op rules (``optable``) only ever see scalar expressions: a driver turns each operand's
home into the expression of one element (``x[k]``, ``x[p + c]``, a local, a literal) and
hands the rule those.
"""
from __future__ import annotations

import math

import numpy as np

from pjrtkit.semantics import dtypes as D

# The dtypes Numba computes in directly (facts from pjrtkit.semantics.dtypes): every other
# (complex, float16, bfloat16, float8, the sub-byte integers) makes a driver decline to the
# NumPy rules.
FLOAT_DTYPES = frozenset({D.FLOAT32, D.FLOAT64})
INT_DTYPES = D.INTS - D.NARROW_INTS
BOOL = D.BOOL
DTYPES = FLOAT_DTYPES | INT_DTYPES | {BOOL}

def scalar_type(dtype: np.dtype) -> str:
    """The NumPy scalar constructor that casts (and, for integers, wraps) to ``dtype``."""
    return "np.bool_" if np.dtype(dtype) == BOOL else f"np.{np.dtype(dtype).name}"


unsigned, signed = D.unsigned_of, D.signed_of


def literal(value, dtype: np.dtype) -> str:
    """A Numba expression of exactly ``value`` in ``dtype``.

    Integers are written as the signed value of the same bits (uint64 2**64-1 as
    ``np.uint64(-1)``): Numba types a Python int literal above int64's range as a float, which
    would round it; the cast back to the unsigned type wraps the signed value exactly."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return "True" if bool(value) else "False"
    if dtype in INT_DTYPES:
        v = int(value)
        if v > D.int_range(np.int64)[1]:
            v -= 1 << 64
        return f"{scalar_type(dtype)}({v})"
    v = float(value)
    if math.isnan(v):
        text = "math.nan"
    elif math.isinf(v):
        text = "math.inf" if v > 0 else "-math.inf"
    else:
        text = repr(v)  # repr round-trips the float64 holding the value exactly
    return f"{scalar_type(dtype)}({text})"


def strides(shape) -> list[int]:
    """Row-major element strides of ``shape``."""
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return out[::-1]


def contiguous(shape, sizes) -> bool:
    """Whether a box of ``sizes`` is one contiguous run of a row-major array of ``shape``."""
    started = False
    for dim, size in zip(shape, sizes):
        if started and size != dim:
            return False
        if size != 1:
            started = True
    return True
