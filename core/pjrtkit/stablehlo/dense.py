"""Dense element constants decoded by us, from raw bytes or printed text, never element-wise
through jaxlib's attribute accessors.

jaxlib's MLIR bindings cannot represent every element type as a Python attribute: handing a
complex constant to Python raises inside C++ (through ``NamedAttribute.attr`` that kills the
process), bf16/fp8/int4 refuse the buffer protocol, and splat accessors differ by type. So a
dense constant is read one of two ways, both decoded here:

- the buffer protocol (``memoryview(attr)``) for the element types it supports: the raw
  storage, one element after another, splats already expanded;
- the printed form (``str(attr)``, which never raises): MLIR prints large constants as the hex
  of their raw storage and small ones as a list of literals.

Storage, as MLIR keeps it: every element whole bytes, little-endian; i1, i2, i4, ui2, ui4 and
f4E2M1FN one byte per element holding the low bits (negative i4 -2 is ``0x0E``); complex
numbers as (real, imaginary) pairs; a hex splat holds one element.
"""
from __future__ import annotations

import re

import numpy as np

from pjrtkit.errors import InvalidArgument, Unimplemented
from pjrtkit.semantics.dtypes import (BOOL, BY_MLIR, NARROW_INTS, facts, int_range, is_int,
                                      is_signed, real_part_of)

# MLIR element type name -> dtype (pjrtkit.semantics' StableHLO names)
ELEMENT_TYPES = BY_MLIR

# Element types stored in the low bits of one byte: (bits, signed).
_SUB_BYTE_INTEGERS = {facts(d).mlir: (facts(d).bits, is_signed(d)) for d in NARROW_INTS}

# Largest constant decoded from its printed form (hex: two characters per byte).
MAX_CONSTANT_BYTES = 1 << 31


def element_dtype(name: str) -> np.dtype:
    """The NumPy dtype of an MLIR element type spelled ``name`` (``"f32"``, ``"complex<f64>"``)."""
    try:
        return ELEMENT_TYPES[name]
    except KeyError:
        raise Unimplemented(f"element type {name} is not supported by pjrtkit") from None


def parse_tensor_type(text: str) -> tuple[tuple[int, ...], str]:
    """``"tensor<2x3xcomplex<f32>>"`` -> ``((2, 3), "complex<f32>")``."""
    text = text.strip()
    if not (text.startswith("tensor<") and text.endswith(">")):
        raise Unimplemented(f"dense constant of type {text[:100]} is not supported")
    body = text[len("tensor<"):-1]
    dims = []
    while True:
        match = re.match(r"(\d+)x", body)
        if match is None:
            break
        dims.append(int(match.group(1)))
        body = body[match.end():]
    if body.startswith("?") or "," in body:
        raise Unimplemented(f"dense constant of type {text[:100]} (dynamic or encoded) is not "
                            f"supported")
    return tuple(dims), body


def from_storage(raw: bytes, element: str, shape: tuple[int, ...]) -> np.ndarray:
    """Decode MLIR's raw storage of a dense constant (a splat holds one element)."""
    dtype = element_dtype(element)
    size = int(np.prod(shape, dtype=np.int64))
    if len(raw) == dtype.itemsize * size:
        data = np.frombuffer(raw, dtype=np.uint8)
    elif len(raw) == dtype.itemsize and size != 1:  # a splat: one element, repeated
        data = np.tile(np.frombuffer(raw, dtype=np.uint8), size)
    else:
        raise InvalidArgument(f"dense constant of type {element} and shape {shape} holds "
                              f"{len(raw)} bytes; expected {dtype.itemsize * size}")
    return _bytes_as(data, element, dtype).reshape(shape)


def _bytes_as(data: np.ndarray, element: str, dtype: np.dtype) -> np.ndarray:
    if element in _SUB_BYTE_INTEGERS:
        bits, signed = _SUB_BYTE_INTEGERS[element]
        values = (data & ((1 << bits) - 1)).astype(np.int8)
        if signed:
            values = values - ((values >> (bits - 1)) << bits)
        return values.astype(dtype)
    if element == "i1":
        return data != 0
    if element == "f4E2M1FN":
        return (data & 0x0F).view(dtype)
    return data.view(dtype).copy()


def from_text(text: str) -> np.ndarray:
    """Decode a printed dense constant, ``dense<BODY> : tensor<...>``."""
    head, _, type_text = text.rpartition(" : ")
    if not head.startswith("dense<") or not head.endswith(">"):
        raise Unimplemented(f"constant {text[:120]} is not supported")
    shape, element = parse_tensor_type(type_text)
    dtype = element_dtype(element)
    body = head[len("dense<"):-1].strip()
    size = int(np.prod(shape, dtype=np.int64))
    if body.startswith('"0x'):
        hex_digits = body[3:-1]
        if len(hex_digits) > 2 * MAX_CONSTANT_BYTES:
            raise Unimplemented(f"constant of {len(hex_digits) // 2} bytes is too large")
        try:
            raw = bytes.fromhex(hex_digits)
        except ValueError:
            raise InvalidArgument(f"malformed hex constant {text[:120]}") from None
        return from_storage(raw, element, shape)
    tokens = _TOKEN.findall(body)
    if dtype.kind == "c":
        if len(tokens) % 2:
            raise InvalidArgument(f"complex constant with an odd number of parts: {text[:120]}")
        # interleaved (real, imaginary) bits; arithmetic would turn inf parts into NaNs
        values = np.ascontiguousarray(_literals(tokens, _component_dtype(dtype))).view(dtype)
    else:
        values = _literals(tokens, dtype)
    if not body.startswith("[") and values.size == 1:
        return np.full(shape, values[0], dtype=dtype)
    if values.size != size:
        raise InvalidArgument(f"dense constant of shape {shape} lists {values.size} elements")
    return values.reshape(shape)


# One literal: a hex bit pattern (NaN payloads, infinities), a float or integer, or a bool.
_TOKEN = re.compile(r"0x[0-9A-Fa-f]+|[-+]?(?:inf|nan)|[-+]?[0-9][0-9.]*(?:[eE][-+]?[0-9]+)?"
                    r"|true|false")


def _component_dtype(dtype: np.dtype) -> np.dtype:
    return real_part_of(dtype)


def _literals(tokens: list[str], dtype: np.dtype) -> np.ndarray:
    out = np.empty(len(tokens), dtype=dtype)
    floating = not _is_integer(dtype)
    bits = None
    if floating and dtype.itemsize in (1, 2, 4, 8):
        bits = out.view(np.dtype(f"u{dtype.itemsize}"))
    for i, token in enumerate(tokens):
        if token in ("true", "false"):
            out[i] = token == "true"
        elif token.startswith("0x"):
            if bits is None:
                out[i] = int(token, 16)
            else:
                bits[i] = int(token, 16) & ((1 << (8 * dtype.itemsize)) - 1)
        elif floating:
            out[i] = float(token)
        else:
            value = int(float(token)) if ("." in token or "e" in token) else int(token)
            out[i] = _wrap(value, dtype)
    return out


def _is_integer(dtype: np.dtype) -> bool:
    return dtype == BOOL or is_int(dtype)


def _wrap(value: int, dtype: np.dtype) -> int:
    """An integer literal as the element type holds it (unsigned may print as negative)."""
    if dtype == np.bool_:
        return value != 0
    low, high = int_range(dtype)
    return (value - low) % (high - low + 1) + low
