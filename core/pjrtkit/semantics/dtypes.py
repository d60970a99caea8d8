"""The element types pjrtkit knows, and every fact about them, said once.

One record per type (``DTypeFacts``): its NumPy dtype (ml_dtypes supplies bfloat16, the float8
and float4 types and the sub-byte integers), its kind, the bits of its values, how StableHLO
(MLIR) and PJRT (``PJRT_Buffer_Type_*``) spell it, and the type XLA's CPU backend does its
arithmetic in. Every code generator, the program loader and the C ABI read these facts from
here; none keeps its own list (``tests/test_semantics.py`` holds them to it).

What XLA's CPU backend computes each type in (its float normalization, ``cpu_compiler.cc``,
widens op by op and rounds each result back):

- float16, bfloat16 and float8_e8m0fnu compute in float32 and round once. bfloat16 and e8m0
  share float32's exponent range, so their smallest values are float32 denormals, which XLA's
  CPU threads flush to zero (denormals-are-zero and flush-to-zero): ``FLUSHES_DENORMALS``.
- the other float8 types and float4_e2m1fn compute in float16 (each op in float32 rounded to
  float16, as float16 ops are), then round to the type: twice.
- int2/int4/uint2/uint4 compute in int8/uint8 and wrap to their width.
- complex types compute in their own precision.

Checked bit for bit against XLA's CPU backend over every pair of float8 values
(``plugins/cpu/tests/test_dtype_sweep.py``).
"""
from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np

BOOL_KIND, SIGNED_KIND, UNSIGNED_KIND, FLOAT_KIND, COMPLEX_KIND = (
    "bool", "signed", "unsigned", "float", "complex")


@dataclasses.dataclass(frozen=True)
class DTypeFacts:
    """Everything pjrtkit knows about one element type."""

    dtype: np.dtype
    kind: str              # BOOL_KIND, SIGNED_KIND, UNSIGNED_KIND, FLOAT_KIND or COMPLEX_KIND
    bits: int              # bits of one value (4 for int4 and float4_e2m1fn, stored in a byte)
    mlir: str              # StableHLO's element type: "f32", "ui8", "i1", "complex<f32>"
    pjrt: str              # PJRT_Buffer_Type_<this>: "F32", "U8", "PRED", "C64"
    compute: np.dtype      # the type XLA's CPU backend does arithmetic in (see above)
    flushes_denormals: bool = False  # that float32 arithmetic flushes denormals to zero

    @property
    def name(self) -> str:
        return self.dtype.name


def _table() -> tuple[DTypeFacts, ...]:
    f16, f32 = np.dtype(np.float16), np.dtype(np.float32)
    rows = [("bool_", BOOL_KIND, 1, "i1", "PRED", None, False)]
    for bits in (8, 16, 32, 64):
        rows.append((f"int{bits}", SIGNED_KIND, bits, f"i{bits}", f"S{bits}", None, False))
        rows.append((f"uint{bits}", UNSIGNED_KIND, bits, f"ui{bits}", f"U{bits}", None, False))
    for bits in (2, 4):  # ml_dtypes' sub-byte integers, one per byte
        rows.append((f"int{bits}", SIGNED_KIND, bits, f"i{bits}", f"S{bits}", np.int8, False))
        rows.append((f"uint{bits}", UNSIGNED_KIND, bits, f"ui{bits}", f"U{bits}", np.uint8,
                     False))
    rows += [
        ("float16", FLOAT_KIND, 16, "f16", "F16", f32, False),
        ("bfloat16", FLOAT_KIND, 16, "bf16", "BF16", f32, True),
        ("float32", FLOAT_KIND, 32, "f32", "F32", None, False),
        ("float64", FLOAT_KIND, 64, "f64", "F64", None, False),
        ("float8_e5m2", FLOAT_KIND, 8, "f8E5M2", "F8E5M2", f16, False),
        ("float8_e4m3fn", FLOAT_KIND, 8, "f8E4M3FN", "F8E4M3FN", f16, False),
        ("float8_e4m3b11fnuz", FLOAT_KIND, 8, "f8E4M3B11FNUZ", "F8E4M3B11FNUZ", f16, False),
        ("float8_e5m2fnuz", FLOAT_KIND, 8, "f8E5M2FNUZ", "F8E5M2FNUZ", f16, False),
        ("float8_e4m3fnuz", FLOAT_KIND, 8, "f8E4M3FNUZ", "F8E4M3FNUZ", f16, False),
        ("float8_e4m3", FLOAT_KIND, 8, "f8E4M3", "F8E4M3", f16, False),
        ("float8_e3m4", FLOAT_KIND, 8, "f8E3M4", "F8E3M4", f16, False),
        ("float8_e8m0fnu", FLOAT_KIND, 8, "f8E8M0FNU", "F8E8M0FNU", f32, True),
        ("float4_e2m1fn", FLOAT_KIND, 4, "f4E2M1FN", "F4E2M1FN", f16, False),
        ("complex64", COMPLEX_KIND, 64, "complex<f32>", "C64", None, False),
        ("complex128", COMPLEX_KIND, 128, "complex<f64>", "C128", None, False),
    ]
    facts = []
    for name, kind, bits, mlir, pjrt, compute, flushes in rows:
        scalar = getattr(np, name, None) or getattr(ml_dtypes, name, None)
        if scalar is None:  # an older ml_dtypes lacks some of the newest types
            continue
        dtype = np.dtype(scalar)
        facts.append(DTypeFacts(dtype, kind, bits, mlir, pjrt,
                                dtype if compute is None else np.dtype(compute), flushes))
    return tuple(facts)


TABLE: tuple[DTypeFacts, ...] = _table()
_BY_DTYPE = {f.dtype: f for f in TABLE}
BY_MLIR = {f.mlir: f.dtype for f in TABLE}
BY_PJRT = {f.pjrt: f.dtype for f in TABLE}


def _of(*kinds) -> frozenset:
    return frozenset(f.dtype for f in TABLE if f.kind in kinds)


BOOL = np.dtype(np.bool_)
FLOAT16 = np.dtype(np.float16)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
INT8 = np.dtype(np.int8)
INT32 = np.dtype(np.int32)
UINT8 = np.dtype(np.uint8)
INT4 = np.dtype(ml_dtypes.int4)
FLOAT4_E2M1FN = np.dtype(ml_dtypes.float4_e2m1fn)
FLOAT8_E8M0FNU = np.dtype(ml_dtypes.float8_e8m0fnu)
COMPLEX64 = np.dtype(np.complex64)
COMPLEX128 = np.dtype(np.complex128)

FLOATS = _of(FLOAT_KIND)
SIGNED_INTS = _of(SIGNED_KIND)
UNSIGNED_INTS = _of(UNSIGNED_KIND)
INTS = SIGNED_INTS | UNSIGNED_INTS
COMPLEXES = _of(COMPLEX_KIND)
# Integers narrower than a byte (stored one per byte): computed in int8/uint8, wrapped.
NARROW_INTS = frozenset(f.dtype for f in TABLE if f.kind in (SIGNED_KIND, UNSIGNED_KIND)
                        and f.bits < 8)
# float8 and float4 types, the PJRT buffer types F8E5M2 ... F4E2M1FN.
FLOAT8_AND_NARROWER = frozenset(f.dtype for f in TABLE if f.kind == FLOAT_KIND and f.bits <= 8)
# Floats NumPy itself has no arithmetic for (ml_dtypes' types), computed in float32.
ML_FLOATS = frozenset((BFLOAT16, *FLOAT8_AND_NARROWER))
# Floats narrower than float32: computed in a wider float and rounded back after every op.
NARROW_FLOATS = frozenset(f.dtype for f in TABLE if f.kind == FLOAT_KIND and f.bits < 32)
# float32 arithmetic on these flushes denormal inputs and results to zero, as on XLA's CPU.
FLUSHES_DENORMALS = frozenset(f.dtype for f in TABLE if f.flushes_denormals)
# Types with whole-byte values that NumPy computes on natively (no ml_dtypes arithmetic).
NUMPY_NATIVE = frozenset({BOOL, *(INTS - NARROW_INTS), FLOAT16, FLOAT32, FLOAT64, *COMPLEXES})

# The element type of a ``!stablehlo.token`` value's buffer (PJRT_Buffer_Type_TOKEN): not a type
# of values (none of the sets above has it), a marker distinct from every real dtype (a one-field
# structure); a token buffer has shape (0,) and no bytes, and no host copy (jaxlib refuses one).
TOKEN = np.dtype([("token", np.bool_)])

# Every dtype pjrtkit knows, in one order (bool, integers, floats, complex; by name).
ALL = (BOOL, *sorted(INTS, key=str), *sorted(FLOATS, key=str), *sorted(COMPLEXES, key=str))


def facts(dtype) -> DTypeFacts:
    """The facts of ``dtype`` (KeyError for a type pjrtkit does not know)."""
    return _BY_DTYPE[np.dtype(dtype)]


def is_known(dtype) -> bool:
    return np.dtype(dtype) in _BY_DTYPE


def is_float(dtype) -> bool:
    return np.dtype(dtype) in FLOATS


def is_complex(dtype) -> bool:
    return np.dtype(dtype) in COMPLEXES


def is_int(dtype) -> bool:
    return np.dtype(dtype) in INTS


def is_signed(dtype) -> bool:
    return np.dtype(dtype) in SIGNED_INTS


def is_unsigned(dtype) -> bool:
    return np.dtype(dtype) in UNSIGNED_INTS


def bit_width(dtype) -> int:
    """Bits of the type's values (2 or 4 for the narrow integers, 4 for float4_e2m1fn, else
    8 * itemsize)."""
    return facts(dtype).bits


def compute_dtype(dtype) -> np.dtype:
    """The dtype XLA's CPU backend does arithmetic in for values of ``dtype``."""
    return facts(dtype).compute


def unsigned_of(dtype) -> np.dtype:
    """The unsigned integer dtype of the same storage width (to read bit patterns)."""
    return np.dtype(f"u{np.dtype(dtype).itemsize}")


def signed_of(dtype) -> np.dtype:
    """The signed integer dtype of the same storage width."""
    return np.dtype(f"i{np.dtype(dtype).itemsize}")


def int_range(dtype) -> tuple[int, int]:
    """(smallest, largest) value of an integer type (of its ``bits``, not its storage)."""
    info = ml_dtypes.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def float_layout(dtype) -> tuple[int, int]:
    """(exponent bits, explicit mantissa bits) of a float type."""
    info = ml_dtypes.finfo(np.dtype(dtype))
    return int(info.nexp), int(info.nmant)


def float_limits(dtype) -> tuple[float, float]:
    """(largest finite value, smallest normal value) of a float type (of its parts for a
    complex type)."""
    info = ml_dtypes.finfo(real_part_of(dtype))
    return float(info.max), float(info.tiny)


def epsilon(dtype) -> float:
    """The distance from 1.0 to the next larger value of a float type (of its parts for a
    complex type)."""
    return float(ml_dtypes.finfo(real_part_of(dtype)).eps)


def by_name(name: str) -> np.dtype:
    """The dtype NumPy or ml_dtypes calls ``name`` ("float32", "bfloat16"); KeyError if
    pjrtkit does not know it."""
    for f in TABLE:
        if f.name == name:
            return f.dtype
    raise KeyError(name)


def real_part_of(dtype) -> np.dtype:
    """The float type of a complex type's parts (``dtype`` itself when it is not complex)."""
    dtype = np.dtype(dtype)
    return {COMPLEX64: FLOAT32, COMPLEX128: FLOAT64}.get(dtype, dtype)


def complex_of(dtype) -> np.dtype:
    """The complex type whose parts are ``dtype`` (float32 or float64)."""
    return {FLOAT32: COMPLEX64, FLOAT64: COMPLEX128}[np.dtype(dtype)]
