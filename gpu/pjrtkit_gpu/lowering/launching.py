"""Launch helpers the rules share: grids, the rank-6 strided copy, fresh outputs."""
from __future__ import annotations

import math
from collections.abc import Sequence

from pjrtkit_gpu import kernels
from pjrtkit_gpu.device_array import DeviceArray


def blocks(n: int, block: int) -> int:
    return max(1, -(-n // block))


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def strided_copy(driver, device_index: int, src: DeviceArray, dst: DeviceArray,
                 shape: Sequence[int], src_strides: Sequence[int], dst_strides: Sequence[int],
                 src_base: int = 0, dst_base: int = 0) -> None:
    """``kernels.strided_copy`` over index space ``shape`` (rank <= 6), strides in elements."""
    n = math.prod(shape)
    if n == 0:
        return
    pad = kernels.MAX_RANK - len(shape)
    if pad < 0:
        raise ValueError(f"rank {len(shape)} > {kernels.MAX_RANK}")
    sizes = (1,) * pad + tuple(shape)
    a = (0,) * pad + tuple(src_strides)
    b = (0,) * pad + tuple(dst_strides)
    driver.launch(device_index, kernels.strided_copy, (blocks(n, kernels.ELEMENTWISE_BLOCK),),
                  [src, dst, n, *sizes, *a, *b, src_base, dst_base],
                  {"BLOCK": kernels.ELEMENTWISE_BLOCK})


def permuted(driver, device_index: int, x: DeviceArray, permutation: Sequence[int]) -> DeviceArray:
    """A new row-major array: ``x`` transposed by ``permutation``."""
    shape = tuple(x.shape[p] for p in permutation)
    if tuple(permutation) == tuple(range(len(permutation))):
        return x
    out = driver.empty(device_index, shape, x.dtype)
    strides = row_major_strides(x.shape)
    strided_copy(driver, device_index, x, out, shape, [strides[p] for p in permutation],
                 row_major_strides(shape))
    return out
