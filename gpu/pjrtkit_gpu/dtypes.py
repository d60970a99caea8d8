"""How the GPU kernels hold each element type they take: its Triton pointer type in device
memory and the Triton type its values are computed in. The facts about the types themselves
(kinds, widths, what XLA computes each in) are pjrtkit.semantics.dtypes'.

Storage: bool is one byte (Triton's ``*u8``, read as ``!= 0``), bfloat16 is Triton's ``bf16``.
float16 and bfloat16 values are held as float32 (the type XLA's CPU backend computes them in),
rounded to their type after every op; everything else in its own type.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.semantics.dtypes import (BFLOAT16, BOOL, FLOAT16, FLOAT32, FLOAT64, NARROW_INTS,
                                      int_range, is_float, is_signed, is_unsigned)
from pjrtkit.semantics.dtypes import SIGNED_INTS as _SIGNED
from pjrtkit.semantics.dtypes import UNSIGNED_INTS as _UNSIGNED

__all__ = ["BFLOAT16", "BOOL", "FLOAT16", "FLOAT32", "FLOAT64",  # with the names below
           "int_range", "is_float", "is_signed", "is_unsigned"]

SIGNED = tuple(sorted(_SIGNED - NARROW_INTS, key=lambda d: d.itemsize))
UNSIGNED = tuple(sorted(_UNSIGNED - NARROW_INTS, key=lambda d: d.itemsize))
INTEGERS = SIGNED + UNSIGNED
FLOATS = (FLOAT16, BFLOAT16, FLOAT32, FLOAT64)
NARROW_FLOATS = (FLOAT16, BFLOAT16)
# The types Triton holds natively (float8, the sub-byte integers and complex numbers reach
# the GPU plugins through pjrtkit.expansions, rewritten onto these).
SUPPORTED = (BOOL, *INTEGERS, *FLOATS)

# The Triton element type of each dtype in memory, as Triton's signatures spell it.
_STORAGE = {BOOL: "u8", FLOAT16: "fp16", BFLOAT16: "bf16", FLOAT32: "fp32", FLOAT64: "fp64",
            **{d: f"i{d.itemsize * 8}" for d in SIGNED},
            **{d: f"u{d.itemsize * 8}" for d in UNSIGNED}}
# ... and as ``triton.language`` names it (``tl.<name>``) in generated code.
_LANGUAGE = {"u8": "uint8", "fp16": "float16", "bf16": "bfloat16", "fp32": "float32",
             "fp64": "float64", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
             "u16": "uint16", "u32": "uint32", "u64": "uint64"}


def is_supported(dtype: np.dtype) -> bool:
    return dtype in _STORAGE


def storage_type(dtype: np.dtype) -> str:
    """``"fp32"``, ``"u8"`` (bool), ...: the element of the pointer a kernel gets."""
    return _STORAGE[dtype]


def storage_language_type(dtype: np.dtype) -> str:
    """``"float32"``, ``"uint8"`` (bool), ...: ``tl.<this>`` in generated code."""
    return _LANGUAGE[_STORAGE[dtype]]


def compute_language_type(dtype: np.dtype) -> str:
    """The ``tl`` type arithmetic on ``dtype`` is done in (``int1`` for bool)."""
    if dtype == BOOL:
        return "int1"
    if dtype in NARROW_FLOATS:
        return "float32"
    return storage_language_type(dtype)
