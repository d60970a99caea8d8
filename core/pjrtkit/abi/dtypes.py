"""PJRT_Buffer_Type <-> NumPy dtype, from the PJRT names of ``pjrtkit.semantics.dtypes``."""
from __future__ import annotations

import numpy as np

from pjrtkit.abi._cffi import lib
from pjrtkit.errors import InvalidArgument, Unimplemented
from pjrtkit.semantics.dtypes import BY_PJRT, TOKEN


def _build() -> tuple[dict[int, np.dtype], dict[np.dtype, int], dict[int, str]]:
    to_dtype: dict[int, np.dtype] = {}
    names: dict[int, str] = {}
    for attr in dir(lib):
        if attr.startswith("PJRT_Buffer_Type_"):
            names[getattr(lib, attr)] = attr.removeprefix("PJRT_Buffer_Type_")
    for short, dtype in BY_PJRT.items():  # the types this ml_dtypes has (pjrtkit.semantics)
        code = getattr(lib, f"PJRT_Buffer_Type_{short}")
        to_dtype[code] = dtype
    to_code = {dt: code for code, dt in to_dtype.items()}
    to_code[TOKEN] = lib.PJRT_Buffer_Type_TOKEN  # an execution's token output; never from host
    return to_dtype, to_code, names


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
