"""Layer-3 cases for every PJRT buffer dtype ml_dtypes can hold: a transfer to the device and
back, and representative ops (transpose, conversions to and from float32, add, multiply,
compare), each compared with XLA's CPU backend.

Ids read ``jax.dtype.<op>[<dtype>-3x4]``; each case's capability is ``JAX dtype <dtype>``, so
the report says per dtype whether the plugin has it. Inputs are values the dtype holds exactly
(drawn in range, then rounded by ml_dtypes), so integer results wrap only where XLA's do and
float results are compared bit for bit (narrow floats) or with the dtype's tolerance.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from pjrtkit.conformance.jax_cases import add

# PJRT_Buffer_Type name -> NumPy dtype, in the order of the PJRT header's families.
BUFFER_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(spec) for name, spec in (
        ("PRED", np.bool_),
        ("S2", ml_dtypes.int2), ("S4", ml_dtypes.int4), ("S8", np.int8), ("S16", np.int16),
        ("S32", np.int32), ("S64", np.int64),
        ("U2", ml_dtypes.uint2), ("U4", ml_dtypes.uint4), ("U8", np.uint8),
        ("U16", np.uint16), ("U32", np.uint32), ("U64", np.uint64),
        ("F16", np.float16), ("BF16", ml_dtypes.bfloat16), ("F32", np.float32),
        ("F64", np.float64), ("C64", np.complex64), ("C128", np.complex128),
        ("F8E5M2", ml_dtypes.float8_e5m2), ("F8E4M3FN", ml_dtypes.float8_e4m3fn),
        ("F8E4M3B11FNUZ", ml_dtypes.float8_e4m3b11fnuz),
        ("F8E5M2FNUZ", ml_dtypes.float8_e5m2fnuz), ("F8E4M3FNUZ", ml_dtypes.float8_e4m3fnuz),
        ("F8E4M3", ml_dtypes.float8_e4m3), ("F8E3M4", ml_dtypes.float8_e3m4),
        ("F8E8M0FNU", ml_dtypes.float8_e8m0fnu), ("F4E2M1FN", ml_dtypes.float4_e2m1fn),
    )
}

SHAPE = (3, 4)
F32 = np.dtype(np.float32)


def _integer_range(dtype: np.dtype) -> tuple[int, int]:
    info = ml_dtypes.iinfo(dtype)
    return max(int(info.min), -50), min(int(info.max), 50)


def _float_range(dtype: np.dtype) -> tuple[float, float]:
    """A range the dtype holds without overflow; float8_e8m0fnu holds positive powers of two
    only (no zero, no sign)."""
    if dtype == np.dtype(ml_dtypes.float8_e8m0fnu):
        return 0.25, 16.0
    return -4.0, 4.0


def values(rng: np.random.Generator, dtype: np.dtype, shape=SHAPE) -> np.ndarray:
    """Values ``dtype`` holds exactly."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in "iu" or dtype.name.startswith(("int", "uint")):
        low, high = _integer_range(dtype)
        return rng.integers(low, high + 1, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.normal(0, 2, size=shape) + 1j * rng.normal(0, 2, size=shape)).astype(dtype)
    low, high = _float_range(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def _float32_inputs(dtype: np.dtype):
    """float32 values to round into ``dtype`` (not exactly representable: rounding shows)."""

    def make(rng):
        if dtype == np.bool_:
            return (rng.uniform(-1, 1, size=SHAPE).round().astype(F32),)
        if dtype.kind in "iu" or dtype.name.startswith(("int", "uint")):
            low, high = _integer_range(dtype)
            return (rng.uniform(low, high, size=SHAPE).astype(F32),)
        if dtype.kind == "c":
            return (rng.normal(0, 2, size=SHAPE).astype(F32),)
        low, high = _float_range(dtype)
        return (rng.uniform(low, high, size=SHAPE).astype(F32),)

    return make


def _held(dtype: np.dtype, count: int = 1):
    return lambda rng: tuple(values(rng, dtype) for _ in range(count))


def _transfer(x):
    return x  # eager: device_put of the input, then read back, is the whole program


def _dtype_cases() -> None:
    import jax.numpy as jnp

    for dtype in BUFFER_DTYPES.values():
        tag = f"{dtype.name}-{SHAPE[0]}x{SHAPE[1]}"
        capability = f"JAX dtype {dtype.name}"
        complex_ = dtype.kind == "c"

        def case(name, fn, make_args, tag=tag, capability=capability, **kwargs):
            add("dtype", name, fn, make_args, tag, capability=capability, **kwargs)

        case("transfer", _transfer, _held(dtype), eager=True,
             description=f"a {dtype.name} array goes to the device and comes back bit for bit")
        case("transpose", lambda x: x.T, _held(dtype))
        case("convert_to_float32",
             (lambda x: jnp.real(x).astype(jnp.float32)) if complex_ else
             (lambda x: x.astype(jnp.float32)), _held(dtype))
        case("convert_from_float32", lambda x, dtype=dtype: x.astype(dtype),
             _float32_inputs(dtype))
        case("add", lambda x, y: x + y, _held(dtype, 2))
        case("multiply", lambda x, y: x * y, _held(dtype, 2))
        # Complex numbers have no order: equality stands for comparisons there.
        case("compare", (lambda x, y: x == y) if complex_ else (lambda x, y: x < y),
             _held(dtype, 2))


BUILDERS = (_dtype_cases,)
