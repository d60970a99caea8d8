"""Reductions of one row buffer, called by fused loops that end in a reduce (see ``codegen``).

A fused loop computes each row's values into a small buffer (it stays in L1) and reduces it
here, so the elementwise code keeps XLA's exact per-op rounding while only the sum is
reordered:

- ``sum_row`` is compiled with LLVM's ``reassoc`` flag (only this function: in the fused loop
  it would let LLVM rewrite the elementwise arithmetic). LLVM then keeps 16-64 partial sums
  in vector lanes and adds them in a tree at the end, like XLA's vectorized reductions: the
  error grows with about n / 64 + log2(64) roundings instead of n.
- maximum/minimum are exact in any order; they run on integer keys (the float's bits with the
  magnitude of negatives flipped, so integer order is IEEE total order, -0 below +0), which
  vectorizes without fast-math flags and keeps XLA's NaN propagation: a NaN of either sign is
  outside the keys of [-inf, +inf] and is returned as NaN.

Rows are never empty (fused groups have at least ``groups.MIN_ELEMENTS`` elements).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from pjrtkit_cpu.vecmath import bits_of_f32, bits_of_f64, f32_of_bits, f64_of_bits

_KEY_NEG_INF_32 = -0x7F800000 - 1     # key of -inf: (0xff800000 as int32) ^ 0x7fffffff
_KEY_POS_INF_32 = 0x7F800000
_KEY_NEG_INF_64 = -0x7FF0000000000000 - 1
_KEY_POS_INF_64 = 0x7FF0000000000000
_NAN32 = np.float32(np.nan)
_NAN64 = np.float64(np.nan)


@njit(nogil=True, error_model="numpy", fastmath={"reassoc"})
def sum_row(row, zero):
    total = zero
    for c in range(row.size):
        total += row[c]
    return total


@njit(nogil=True, error_model="numpy")
def _keys_f32(row):
    high = np.int64(-(1 << 40))
    low = np.int64(1 << 40)
    for c in range(row.size):
        b = np.int64(bits_of_f32(row[c]))
        key = b ^ ((b >> 31) & 0x7FFFFFFF)
        high = max(high, key)
        low = min(low, key)
    return high, low


@njit(nogil=True, error_model="numpy")
def _keys_f64(row):
    high = np.int64(-(1 << 63))
    low = np.int64((1 << 63) - 1)
    for c in range(row.size):
        b = bits_of_f64(row[c])
        key = b ^ ((b >> 63) & 0x7FFFFFFFFFFFFFFF)
        high = max(high, key)
        low = min(low, key)
    return high, low


@njit(nogil=True, error_model="numpy")
def max_row_f32(row):
    high, low = _keys_f32(row)
    if high > _KEY_POS_INF_32 or low < _KEY_NEG_INF_32:
        return _NAN32
    return f32_of_bits(high ^ ((high >> 31) & 0x7FFFFFFF))


@njit(nogil=True, error_model="numpy")
def min_row_f32(row):
    high, low = _keys_f32(row)
    if high > _KEY_POS_INF_32 or low < _KEY_NEG_INF_32:
        return _NAN32
    return f32_of_bits(low ^ ((low >> 31) & 0x7FFFFFFF))


@njit(nogil=True, error_model="numpy")
def max_row_f64(row):
    high, low = _keys_f64(row)
    if high > _KEY_POS_INF_64 or low < _KEY_NEG_INF_64:
        return _NAN64
    return f64_of_bits(high ^ ((high >> 63) & 0x7FFFFFFFFFFFFFFF))


@njit(nogil=True, error_model="numpy")
def min_row_f64(row):
    high, low = _keys_f64(row)
    if high > _KEY_POS_INF_64 or low < _KEY_NEG_INF_64:
        return _NAN64
    return f64_of_bits(low ^ ((low >> 63) & 0x7FFFFFFFFFFFFFFF))
