"""The element types the GPU kernels support, how each is stored in device memory (its Triton
pointer type) and the type its arithmetic is done in.

Storage: bool is one byte (Triton's ``*u8``, read as ``!= 0``), bfloat16 is Triton's ``bf16``.
Arithmetic follows what XLA's CPU backend (the conformance reference) does: float16 and
bfloat16 compute in float32 and round after every op; everything else in its own type.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

BOOL = np.dtype(np.bool_)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT16 = np.dtype(np.float16)
FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
SIGNED = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
UNSIGNED = tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
INTEGERS = SIGNED + UNSIGNED
FLOATS = (FLOAT16, BFLOAT16, FLOAT32, FLOAT64)
NARROW_FLOATS = (FLOAT16, BFLOAT16)
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


def is_float(dtype: np.dtype) -> bool:
    return dtype in FLOATS


def is_signed(dtype: np.dtype) -> bool:
    return dtype in SIGNED


def is_unsigned(dtype: np.dtype) -> bool:
    return dtype in UNSIGNED
