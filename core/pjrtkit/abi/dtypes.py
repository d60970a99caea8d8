"""PJRT_Buffer_Type <-> NumPy dtype (ml_dtypes supplies bfloat16, the float8s and sub-byte ints)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from pjrtkit.abi._cffi import lib
from pjrtkit.errors import InvalidArgument, Unimplemented

_NAMES = {
    "PRED": np.bool_, "S8": np.int8, "S16": np.int16, "S32": np.int32, "S64": np.int64,
    "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64,
    "F16": np.float16, "F32": np.float32, "F64": np.float64,
    "C64": np.complex64, "C128": np.complex128, "BF16": "bfloat16",
    "F8E5M2": "float8_e5m2", "F8E4M3FN": "float8_e4m3fn", "F8E4M3B11FNUZ": "float8_e4m3b11fnuz",
    "F8E5M2FNUZ": "float8_e5m2fnuz", "F8E4M3FNUZ": "float8_e4m3fnuz", "F8E4M3": "float8_e4m3",
    "F8E3M4": "float8_e3m4", "F8E8M0FNU": "float8_e8m0fnu", "F4E2M1FN": "float4_e2m1fn",
    "S4": "int4", "U4": "uint4", "S2": "int2", "U2": "uint2",
}


def _build() -> tuple[dict[int, np.dtype], dict[np.dtype, int], dict[int, str]]:
    to_dtype: dict[int, np.dtype] = {}
    names: dict[int, str] = {}
    for attr in dir(lib):
        if attr.startswith("PJRT_Buffer_Type_"):
            names[getattr(lib, attr)] = attr.removeprefix("PJRT_Buffer_Type_")
    for short, spec in _NAMES.items():
        code = getattr(lib, f"PJRT_Buffer_Type_{short}")
        if isinstance(spec, str):
            spec = getattr(ml_dtypes, spec, None)  # older ml_dtypes lack some types
            if spec is None:
                continue
        to_dtype[code] = np.dtype(spec)
    return to_dtype, {dt: code for code, dt in to_dtype.items()}, names


_TO_DTYPE, _TO_CODE, _CODE_NAMES = _build()


def type_name(code: int) -> str:
    return _CODE_NAMES.get(int(code), f"<unknown PJRT_Buffer_Type {int(code)}>")


def to_dtype(code: int) -> np.dtype:
    try:
        return _TO_DTYPE[int(code)]
    except KeyError:
        if int(code) in _CODE_NAMES:
            raise Unimplemented(
                f"PJRT_Buffer_Type_{type_name(code)} has no NumPy dtype in pjrtkit") from None
        raise InvalidArgument(f"{type_name(code)} is not a PJRT_Buffer_Type") from None


def to_code(dtype: np.dtype | type) -> int:
    code = _TO_CODE.get(dtype)  # a np.dtype already (every buffer's): no conversion
    if code is not None:
        return code
    try:
        return _TO_CODE[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise Unimplemented(f"dtype {dtype} has no PJRT_Buffer_Type") from None
