"""PJRT_Buffer_Type <-> NumPy dtype."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from pjrtkit.abi._cffi import lib
from pjrtkit.abi.dtypes import to_code, to_dtype
from pjrtkit.errors import InvalidArgument, Unimplemented

EXPECTED = {
    "PRED": np.bool_, "S8": np.int8, "S16": np.int16, "S32": np.int32, "S64": np.int64,
    "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64, "F16": np.float16,
    "F32": np.float32, "F64": np.float64, "BF16": ml_dtypes.bfloat16, "C64": np.complex64,
    "C128": np.complex128, "F8E5M2": ml_dtypes.float8_e5m2, "F8E4M3FN": ml_dtypes.float8_e4m3fn,
    "F8E4M3B11FNUZ": ml_dtypes.float8_e4m3b11fnuz, "F8E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
    "F8E4M3FNUZ": ml_dtypes.float8_e4m3fnuz, "S4": ml_dtypes.int4, "U4": ml_dtypes.uint4,
    "S2": ml_dtypes.int2, "U2": ml_dtypes.uint2, "F4E2M1FN": ml_dtypes.float4_e2m1fn,
    "F8E4M3": ml_dtypes.float8_e4m3, "F8E3M4": ml_dtypes.float8_e3m4,
    "F8E8M0FNU": ml_dtypes.float8_e8m0fnu,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_round_trip(name):
    code = getattr(lib, f"PJRT_Buffer_Type_{name}")
    assert to_dtype(code) == np.dtype(EXPECTED[name])
    assert to_code(to_dtype(code)) == code


def test_type_without_dtype_is_unimplemented_and_named():
    with pytest.raises(Unimplemented, match="PJRT_Buffer_Type_TOKEN"):
        to_dtype(lib.PJRT_Buffer_Type_TOKEN)


def test_unknown_code_is_invalid_argument():
    with pytest.raises(InvalidArgument, match="1234"):
        to_dtype(1234)


def test_unknown_dtype_is_unimplemented():
    with pytest.raises(Unimplemented, match="object"):
        to_code(np.dtype(object))
