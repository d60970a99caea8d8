"""The dtype facts the expansions need, in one place: which types they rewrite, what into, and
each narrow float format's layout.

Facts are read from the semantics source (``pjrtkit.semantics.dtypes``) and from the formats'
own conversions, never typed in, except the one place XLA's CPU backend differs from
ml_dtypes (a NaN converted to float4_e2m1fn, measured: XLA gives -0.0 for either sign,
ml_dtypes +-0.0).
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from pjrtkit.semantics import dtypes as D

BOOL = D.BOOL
FLOAT16 = D.FLOAT16
FLOAT32 = D.FLOAT32
FLOAT64 = D.FLOAT64
INT8, UINT8 = D.INT8, D.UINT8
UINT32, UINT64 = D.by_name("uint32"), D.by_name("uint64")

COMPLEX_PARTS = {D.COMPLEX64: FLOAT32, D.COMPLEX128: FLOAT64}

FLOAT8_AND_FLOAT4 = tuple(sorted(D.FLOAT8_AND_NARROWER, key=str))
NARROW_INTS = tuple(sorted(D.NARROW_INTS, key=str))
NARROW = FLOAT8_AND_FLOAT4 + NARROW_INTS
# The types the expansions rewrite into others: a backend declaring a primitive set stores
# buffers of these as bytes (and reinterprets them with stablehlo.bitcast_convert) without
# computing on them.
STORED_ONLY = (*COMPLEX_PARTS, *NARROW)


@dataclasses.dataclass(frozen=True)
class FloatFormat:
    """A float8/float4 format: ``bits`` (8 or 4), ``mantissa`` bits, ``exponent`` bits,
    ``bias``, ``min_exponent`` (of the smallest normal), ``max`` (largest finite), ``kind``:
    ``ieee`` (infinities; NaN is an all-ones exponent with a non-zero mantissa), ``fn`` (no
    infinities; NaN is all ones), ``fnuz`` (no infinities, no -0; NaN is the sign bit alone),
    ``f4`` (neither infinities nor NaN: overflow saturates), ``e8m0`` (exponent only, no sign,
    no zero; NaN is all ones); ``nan_code``: a NaN's encoding (sign bit clear), ``inf_code``."""

    dtype: np.dtype
    bits: int
    mantissa: int
    exponent: int
    bias: int
    min_exponent: int
    max: float
    kind: str
    nan_code: int
    inf_code: int | None

    @property
    def compute(self) -> np.dtype:
        return compute_dtype(self.dtype)


@functools.cache
def float_format(dtype) -> FloatFormat:
    dtype = np.dtype(dtype)
    exponent, mantissa = D.float_layout(dtype)
    largest, tiny = D.float_limits(dtype)
    min_exponent = math.frexp(tiny)[1] - 1  # tiny = 2 ** min_exponent
    bits = D.bit_width(dtype)

    def code(x) -> int:
        return int(np.array(x, FLOAT32).astype(dtype).view(UINT8))

    inf = np.isinf(np.array(np.inf, FLOAT32).astype(dtype).astype(FLOAT32))
    nan = np.isnan(np.array(np.nan, FLOAT32).astype(dtype).astype(FLOAT32))
    if mantissa == 0:
        kind = "e8m0"
    elif inf:
        kind = "ieee"
    elif not nan:
        kind = "f4"
    elif code(np.nan) == 1 << (bits - 1):
        kind = "fnuz"
    else:
        kind = "fn"
    nan_code = (1 << (bits - 1)) if kind == "f4" else code(np.nan)  # XLA: NaN -> -0.0
    return FloatFormat(dtype=dtype, bits=bits, mantissa=mantissa, exponent=exponent,
                       bias=1 - min_exponent, min_exponent=min_exponent,
                       max=largest, kind=kind, nan_code=nan_code,
                       inf_code=code(np.inf) if inf else None)


def compute_dtype(dtype) -> np.dtype:
    """The type XLA's CPU backend computes a narrow type in, which is also the type the
    narrow pass stores its values in: float16 for the float8/float4 formats (float32 for
    float8_e8m0fnu, whose range float16 lacks), int8/uint8 for the sub-byte integers."""
    dtype = np.dtype(dtype)
    return D.compute_dtype(dtype) if dtype in NARROW else dtype


def int_bits(dtype) -> int:
    return D.bit_width(dtype)


def is_narrow_float(dtype) -> bool:
    return np.dtype(dtype) in FLOAT8_AND_FLOAT4


def is_narrow_int(dtype) -> bool:
    return np.dtype(dtype) in NARROW_INTS
