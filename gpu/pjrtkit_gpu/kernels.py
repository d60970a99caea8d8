"""The hand-written Triton kernels: one source for every target (sm_80/90/100 cubin, gfx90a/942/1100
hsaco) and for Triton's interpreter. Generated kernels (fused elementwise chains, reductions) are
``codegen``'s.

Importing this module imports Triton in the process's mode (``triton_setup.import_triton``):
interpreted under emulation, compiled otherwise. Kernels use only APIs that
Triton 3.6 and 3.9 both have (``tl.load``/``store`` with masks, ``tl.dot`` with
``input_precision``, ``tl.sum``, ``tl.where``, ``tl.program_id``, ``tl.arange``, ``.to``).
Index arithmetic is 64-bit: arrays may pass 2**31 elements.

``MAX_RANK``: structural kernels see every array as rank 6 (leading dimensions of size 1).
"""
from __future__ import annotations

from pjrtkit_gpu.triton_setup import import_triton

triton, tl = import_triton()

MAX_RANK = 6
ELEMENTWISE_BLOCK = 1024
# The tl.dot matmul's tiles and launch options are autotune's (its default: 32x32x32, since
# tl.dot needs every tile dimension >= 16).
# Tiles of the matmul that multiplies by broadcasting (float64 and integers, which tensor
# cores do not take on every target): the BM x BK x BN product lives in registers.
MATMUL_TILES_BROADCAST = (16, 16, 8)


@triton.jit
def strided_copy(src, dst, n,
                 s0, s1, s2, s3, s4, s5,
                 a0, a1, a2, a3, a4, a5,
                 b0, b1, b2, b3, b4, b5,
                 src_base, dst_base, BLOCK: tl.constexpr):
    """For every index (c0..c5) of the shape s0..s5 (n elements):
    ``dst[dst_base + sum(c * b)] = src[src_base + sum(c * a)]``. Transpose, broadcast (a = 0),
    slice, reverse (a < 0), reshape, pad and concatenate (strided writes) are all this."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    mask = i < n
    rem = i
    c5 = rem % s5
    rem = rem // s5
    c4 = rem % s4
    rem = rem // s4
    c3 = rem % s3
    rem = rem // s3
    c2 = rem % s2
    rem = rem // s2
    c1 = rem % s1
    c0 = rem // s1
    source = src_base + c0 * a0 + c1 * a1 + c2 * a2 + c3 * a3 + c4 * a4 + c5 * a5
    target = dst_base + c0 * b0 + c1 * b1 + c2 * b2 + c3 * b3 + c4 * b4 + c5 * b5
    value = tl.load(src + source, mask=mask)
    tl.store(dst + target, value, mask=mask)


@triton.jit
def iota(out, n, stride, size, IS_FLOAT: tl.constexpr, BLOCK: tl.constexpr):
    """``out[i] = (i // stride) % size``: the index along one dimension."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    mask = i < n
    value = (i // stride) % size
    if IS_FLOAT:
        tl.store(out + i, value.to(tl.float32).to(out.dtype.element_ty), mask=mask)
    else:
        tl.store(out + i, value.to(out.dtype.element_ty), mask=mask)


@triton.jit
def batched_matmul(a, b, c, M, N, K, a_batch, a_major, b_batch, b_major,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                   USE_DOT: tl.constexpr, IEEE: tl.constexpr, WIDEN: tl.constexpr,
                   A_T: tl.constexpr, B_T: tl.constexpr):
    """``c[z] = a[z] @ b[z]`` for a (Z, M, K), b (Z, K, N) read through strides, c (Z, M, N)
    row-major; grid (cdiv(M, BM) * Z, cdiv(N, BN)): the batch shares the first dimension,
    which takes 2^31-1 programs where the others take 65535. Element (z, m, k) of a is at
    ``a + z * a_batch + m * a_major + k`` (A_T: ``m + k * a_major``, a stored transposed), and
    (z, k, n) of b at ``b + z * b_batch + k * b_major + n`` (B_T: ``k + n * b_major``): an
    operand the dot reads in another order than its own is not copied first. USE_DOT: tl.dot
    with float32 accumulation (float32 inputs with IEEE float32 products, not TF32); else
    products broadcast and summed in c's type (float64, integers: wrapping like XLA). WIDEN:
    bfloat16 tiles are widened to float32 before tl.dot (exact: their products are exact in
    float32); only under Triton's interpreter, whose tl.dot multiplies bfloat16's raw bits."""
    row_blocks = tl.cdiv(M, BM)
    pm = tl.program_id(0) % row_blocks
    pn = tl.program_id(1)
    z = (tl.program_id(0) // row_blocks).to(tl.int64)
    a += z * a_batch
    b += z * b_batch
    c += z * M * N
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    if USE_DOT:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    else:
        acc = tl.zeros((BM, BN), dtype=c.dtype.element_ty)
    for k0 in range(0, K, BK):
        ka = k0 + rk
        if A_T:
            a_at = rm[:, None].to(tl.int64) + ka[None, :].to(tl.int64) * a_major
        else:
            a_at = rm[:, None].to(tl.int64) * a_major + ka[None, :]
        if B_T:
            b_at = ka[:, None].to(tl.int64) + rn[None, :].to(tl.int64) * b_major
        else:
            b_at = ka[:, None].to(tl.int64) * b_major + rn[None, :]
        x = tl.load(a + a_at, mask=(rm[:, None] < M) & (ka[None, :] < K), other=0)
        y = tl.load(b + b_at, mask=(ka[:, None] < K) & (rn[None, :] < N), other=0)
        if WIDEN:
            x = x.to(tl.float32)
            y = y.to(tl.float32)
        if USE_DOT:
            if IEEE:
                acc += tl.dot(x, y, input_precision="ieee")
            else:
                acc += tl.dot(x, y)
        else:
            x = x.to(c.dtype.element_ty)
            y = y.to(c.dtype.element_ty)
            acc += tl.sum(x[:, :, None] * y[None, :, :], axis=1).to(c.dtype.element_ty)
    tl.store(c + rm[:, None].to(tl.int64) * N + rn[None, :], acc.to(c.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))
