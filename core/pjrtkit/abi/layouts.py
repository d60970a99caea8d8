"""PJRT_Buffer_MemoryLayout: pjrtkit keeps every array dense; a buffer may be made in another
dense order (a permutation of its dimensions, ``layout_order``), tiles are refused."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.args import int_list
from pjrtkit.errors import InvalidArgument, Unimplemented


def row_major_strides(shape: Sequence[int], itemsize: int) -> list[int]:
    strides, step = [], itemsize
    for dim in reversed(shape):
        strides.append(step)
        step *= max(int(dim), 1)
    return strides[::-1]


def layout_order(ptr: Any, shape: Sequence[int], itemsize: int,
                 what: str) -> tuple[int, ...] | None:
    """The dense layout a PJRT_Buffer_MemoryLayout asks for, as minor_to_major: None for NULL or
    row-major, else a permutation of the dimensions (``jax.experimental.layout``: a tiled
    layout without tiles, or byte strides of a dense permuted layout). Tiles and strides of
    no permutation are UNIMPLEMENTED."""
    if ptr == ffi.NULL:
        return None
    layout = ffi.cast("PJRT_Buffer_MemoryLayout*", ptr)  # read whole: see require_dense
    n = len(shape)
    if layout.type == lib.PJRT_Buffer_MemoryLayout_Type_Tiled:
        tiled = layout.tiled
        order = int_list(tiled.minor_to_major, tiled.minor_to_major_size,
                         f"{what}.tiled.minor_to_major")
        if tiled.num_tiles == 0 and sorted(order) == list(range(n)):
            return None if order == list(range(n - 1, -1, -1)) else tuple(order)
        if tiled.num_tiles == 0 and not order:
            return None
    elif layout.type == lib.PJRT_Buffer_MemoryLayout_Type_Strides:
        strides = layout.strides
        got = int_list(strides.byte_strides, strides.num_byte_strides,
                       f"{what}.strides.byte_strides")
        if len(got) == n:
            # the dense layout these strides describe: dimensions from smallest stride up
            order = sorted(range(n), key=lambda d: (got[d], -d))
            major_to_minor = order[::-1]
            expected = row_major_strides([shape[d] for d in major_to_minor], itemsize)
            if all(got[d] == expected[i] or shape[d] <= 1
                   for i, d in enumerate(major_to_minor)):
                return None if order == list(range(n - 1, -1, -1)) else tuple(order)
    require_dense(ptr, shape, itemsize, what)  # raises, naming the layout
    return None


def require_dense(ptr: Any, shape: Sequence[int], itemsize: int, what: str) -> None:
    """Accept NULL or a layout equal to dense row-major; anything else is UNIMPLEMENTED."""
    if ptr == ffi.NULL:
        return
    # jaxlib never sets this struct's struct_size, nor those of its union members: its
    # ConvertToBufferMemoryLayoutData fills only ``type`` and the member, leaving struct_size
    # as whatever the stack held (often 0, sometimes not). So the struct is read whole, as
    # XLA's own plugins read it; the caller's Args struct_size already vouched for the pointer.
    layout = ffi.cast("PJRT_Buffer_MemoryLayout*", ptr)
    kind = layout.type
    n = len(shape)
    if kind == lib.PJRT_Buffer_MemoryLayout_Type_Tiled:
        tiled = layout.tiled
        order = int_list(tiled.minor_to_major, tiled.minor_to_major_size,
                         f"{what}.tiled.minor_to_major")
        if order in ([], list(range(n - 1, -1, -1))) and tiled.num_tiles == 0:
            return
        detail = f"tiled layout minor_to_major={order} with {tiled.num_tiles} tile(s)"
    elif kind == lib.PJRT_Buffer_MemoryLayout_Type_Strides:
        strides = layout.strides
        got = int_list(strides.byte_strides, strides.num_byte_strides,
                       f"{what}.strides.byte_strides")
        if got == row_major_strides(shape, itemsize):
            return
        detail = f"byte strides {got}"
    else:
        detail = f"layout type {kind}"
    raise Unimplemented(
        f"{what}: pjrtkit only handles dense row-major arrays, got {detail} for shape "
        f"{tuple(shape)}; pass the default layout")


def host_array(ptr: Any, shape: Sequence[int], dtype: np.dtype,
               byte_strides: Sequence[int] | None, what: str) -> np.ndarray:
    """An owned C-contiguous copy of host memory, honouring byte strides."""
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise InvalidArgument(f"{what}: negative dimension in shape {shape}")
    if 0 in shape:
        return np.empty(shape, dtype)
    if ptr == ffi.NULL:
        raise InvalidArgument(f"{what} is NULL for a non-empty array of shape {shape}")
    if byte_strides is None:
        span = math.prod(shape) * dtype.itemsize
        return np.ndarray(shape, dtype, buffer=ffi.buffer(ptr, span)).copy()
    if len(byte_strides) != len(shape):
        raise InvalidArgument(
            f"{what}: {len(byte_strides)} byte strides for a rank-{len(shape)} array")
    # A negative stride walks backwards from ``ptr`` (a reversed NumPy view): the memory the
    # array touches starts at the most negative offset and ends at the most positive one.
    low = sum((d - 1) * s for d, s in zip(shape, byte_strides) if s < 0)
    high = sum((d - 1) * s for d, s in zip(shape, byte_strides) if s > 0) + dtype.itemsize
    base = ffi.cast("char*", ptr) + low
    view = np.ndarray(shape, dtype, buffer=ffi.buffer(base, high - low), offset=-low,
                      strides=tuple(byte_strides))
    return np.array(view, copy=True, order="C")
