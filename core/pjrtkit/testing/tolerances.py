"""The one per-dtype tolerance table used to compare results against XLA's CPU backend.

Integers, bools and bit-level results are compared exactly. Float tolerances allow for a
different summation order and for NumPy's vs XLA's (Eigen) transcendental approximations; each
entry says why it is what it is.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

# (rtol, atol) per dtype.
TOLERANCES: dict[np.dtype, tuple[float, float]] = {
    # 10 mantissa bits; XLA computes f16 math in f32 and rounds, so a few ulps of rounding.
    np.dtype(np.float16): (2e-3, 2e-3),
    # 7 mantissa bits: one ulp is 2**-7 ~ 8e-3 relative.
    np.dtype(ml_dtypes.bfloat16): (1.6e-2, 1.6e-2),
    # Summation order and transcendental approximations differ by a few ulps (~1e-7 each).
    np.dtype(np.float32): (2e-5, 1e-6),
    np.dtype(np.complex64): (2e-5, 1e-6),
    np.dtype(np.float64): (1e-12, 1e-14),
    np.dtype(np.complex128): (1e-12, 1e-14),
}


# A backend whose float32 contractions run on bfloat16 operands (feature "bf16_contractions",
# a TPU's DEFAULT precision) is compared, for programs with a contraction, at bfloat16's
# tolerance instead of float32's (and complex64's): each operand is rounded to bf16's 8 bits.
REDUCED_PRECISION_DTYPES = {np.dtype(np.float32): np.dtype(ml_dtypes.bfloat16),
                            np.dtype(np.complex64): np.dtype(ml_dtypes.bfloat16)}


def tolerance(dtype) -> tuple[float, float]:
    """(rtol, atol) for ``dtype``; (0, 0) means exact."""
    return TOLERANCES.get(np.dtype(dtype), (0.0, 0.0))


def assert_close(actual, expected, *, what: str = "result", loosen: float = 1.0,
                 reduced_precision: bool = False, to_scale: bool = False) -> None:
    """Assert ``actual`` matches ``expected`` (the XLA CPU result) in dtype, shape and value.

    ``loosen`` multiplies the tolerance; callers that pass it say why in a comment.
    ``reduced_precision``: the result came from contractions on bfloat16 operands (a TPU's
    DEFAULT precision); float32 and complex64 are compared at bfloat16's tolerance.
    ``to_scale``: for results that are sums of many terms of mixed sign (a transform, a long
    contraction), whose rounding error is relative to the result's scale, not to each element
    (an element that cancels to near zero carries the absolute error of the large ones): the
    absolute tolerance is the relative one times the largest finite magnitude of ``expected``.
    """
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    compared_as = REDUCED_PRECISION_DTYPES.get(expected.dtype, expected.dtype) \
        if reduced_precision else expected.dtype
    rtol, atol = tolerance(compared_as)
    if rtol == 0 and atol == 0:
        if expected.dtype.kind == "f" or expected.dtype.name.startswith(("bfloat", "float")):
            same = actual.view(np.dtype(f"u{actual.dtype.itemsize}")) == expected.view(
                np.dtype(f"u{expected.dtype.itemsize}"))
            assert same.all(), f"{what}: bits differ at {np.argwhere(~same)[:5].tolist()}"
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=what)
        return
    with np.errstate(invalid="ignore"):  # NaN payloads warn when widened; they compare as NaN
        wide_actual = actual.astype(np.float64) if actual.dtype.kind != "c" else actual
        wide_expected = expected.astype(np.float64) if expected.dtype.kind != "c" else expected
    if to_scale and expected.size:
        finite = np.isfinite(expected)
        atol = rtol * (float(np.abs(expected[finite]).max()) if finite.any() else 0.0)
        what = f"{what} (absolute tolerance {rtol * loosen:g} x the largest magnitude)"
    np.testing.assert_allclose(wide_actual, wide_expected, rtol=rtol * loosen, atol=atol * loosen,
                               equal_nan=True, err_msg=what)

