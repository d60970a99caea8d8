"""Launch helpers the rules share: grids, the strided copy (rank 6 per launch), fresh outputs."""
from __future__ import annotations

import itertools
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


def coalesced(shape: Sequence[int], *strides: Sequence[int]
              ) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """``shape`` and its ``strides`` (one sequence per array) with size-1 dimensions dropped
    and each pair of neighbouring dimensions that every array steps through as one merged:
    the same index space, as few dimensions as it has."""
    dims = [(n, [s[d] for s in strides]) for d, n in enumerate(shape) if n != 1]
    merged: list[tuple[int, list[int]]] = []
    for n, step in dims:
        if merged and all(outer == inner * n for outer, inner in zip(merged[-1][1], step)):
            merged[-1] = (merged[-1][0] * n, step)
        else:
            merged.append((n, step))
    return (tuple(n for n, _ in merged),
            [tuple(step[k] for _, step in merged) for k in range(len(strides))])


def strided_copy(driver, device_index: int, src: DeviceArray, dst: DeviceArray,
                 shape: Sequence[int], src_strides: Sequence[int], dst_strides: Sequence[int],
                 src_base: int = 0, dst_base: int = 0) -> None:
    """``kernels.strided_copy`` over index space ``shape``, strides in elements. A space of
    rank over ``kernels.MAX_RANK`` is coalesced (``coalesced``) and, if still too deep, copied
    by one launch per index of its leading dimensions; the usual ranks launch as they are
    (nothing computed per call)."""
    n = math.prod(shape)
    if n == 0:
        return
    if len(shape) > kernels.MAX_RANK:
        shape, (src_strides, dst_strides) = coalesced(shape, src_strides, dst_strides)
    extra = len(shape) - kernels.MAX_RANK
    if extra > 0:
        for index in itertools.product(*(range(k) for k in shape[:extra])):
            strided_copy(driver, device_index, src, dst, shape[extra:], src_strides[extra:],
                         dst_strides[extra:],
                         src_base + sum(i * s for i, s in zip(index, src_strides)),
                         dst_base + sum(i * s for i, s in zip(index, dst_strides)))
        return
    pad = kernels.MAX_RANK - len(shape)
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
