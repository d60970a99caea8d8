"""Distances between floating results in units in the last place (ulps) of a target dtype.

One definition for every accuracy check (the dtype sweep, the accuracy table and its tests):
the error of ``actual`` against an exact (float64 or better) ``reference`` is
``|actual - reference| / spacing(round(reference))``, where ``spacing`` is the gap between
the target dtype's values at the correctly rounded result (at the smallest normal binade and
below: the denormal spacing). Non-finite values count as 0 ulps when both sides agree (NaN and
NaN, inf and inf of one sign) and as infinitely far otherwise.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np


def float_layout(dtype) -> tuple[int, int, int]:
    """(explicit mantissa bits, exponent of the smallest normal, exponent of the largest
    finite value) of a float dtype NumPy or ml_dtypes knows."""
    info = ml_dtypes.finfo(np.dtype(dtype))
    return int(info.nmant), int(info.minexp), int(info.maxexp) - 1


def spacing(values: np.ndarray, dtype) -> np.ndarray:
    """The gap between ``dtype``'s neighbours at each float64 ``values`` (taken as already
    rounded to ``dtype``); denormals have the smallest normal binade's gap."""
    nmant, minexp, maxexp = float_layout(dtype)
    magnitude = np.abs(np.asarray(values, np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    exponent = np.clip(np.nan_to_num(exponent, nan=0.0, posinf=maxexp, neginf=minexp),
                       minexp, maxexp)
    return np.ldexp(1.0, (exponent - nmant).astype(np.int64))


def ulp_error(actual: np.ndarray, reference: np.ndarray, dtype) -> np.ndarray:
    """Per element: how many ``dtype`` ulps ``actual`` (any float dtype) lies from the exact
    ``reference`` (float64), measured at the correctly rounded reference."""
    with np.errstate(invalid="ignore", over="ignore"):
        a = np.asarray(actual).astype(np.float64)
        r = np.asarray(reference, np.float64)
        rounded = r.astype(np.dtype(dtype)).astype(np.float64)
        error = np.abs(a - r) / spacing(rounded, dtype)
    both_nan = np.isnan(a) & np.isnan(r)
    same_inf = np.isinf(a) & (a == r)
    error = np.where(both_nan | same_inf, 0.0, error)
    return np.where(np.isnan(error) | (np.isinf(a) != np.isinf(r)), np.inf, error)
