"""``pjrtkit_cpu.multiply_add`` (made by ``pjrtkit_cpu.contraction``): ``a * b + c`` rounded
as XLA's CPU backend rounds it.

float32: the product of two float32 values is exact in float64, so the float64 sum rounded to
float32 is the fused multiply-add (it can differ only when the float64 sum lands exactly
halfway between two float32 values without being exact, about once in 2**29). float64: no
wider type is exact, so a compiled loop (Numba, whose LLVM contracts it into the FMA
instruction; compiled once per process, in the background from the first compile that needs
it, cached on disk like fused loops). float16 (contracted only on hosts with float16
arithmetic, ``contraction.float16_contracted``): the product in float32 (exact), the sum
rounded to float32 and then to float16, as XLA's code for those hosts rounds it.
``negate_product``: ``c - a * b``; ``negate_addend``: ``a * b - c`` (negation is exact).
"""
from __future__ import annotations

import threading

import numpy as np

from pjrtkit.semantics import dtypes as D

from pjrtkit_cpu.contraction import MULTIPLY_ADD
from pjrtkit_cpu.fusion import cache
from pjrtkit_cpu.loopnest import module
from pjrtkit_cpu.lowering.registry import RULES

_WIDE = {D.FLOAT32: D.FLOAT64, D.FLOAT16: D.FLOAT32}
_F64 = D.FLOAT64
_F64_SOURCE = module.kernel_module([
    "def kernel(a, b, c, out):",
    "    for i in range(out.shape[0]):",
    "        out[i] = a[i] * b[i] + c[i]",
])
_f64_future = None
_f64_lock = threading.Lock()


def _f64_loop():
    """The Future of the float64 multiply-add loop (its compile starts at the first call)."""
    global _f64_future
    with _f64_lock:
        if _f64_future is None:
            _f64_future = cache.compile_async(_F64_SOURCE, [(_F64, 1, True)] * 3 + [(_F64, 1, False)],
                                              "the float64 multiply-add loop", always=True)
        return _f64_future


@RULES.register(MULTIPLY_ADD)
def multiply_add(op, ctx):
    dtype = np.dtype(op.results[0].type.dtype)
    negate_product = bool(op.attributes.get("negate_product"))
    negate_addend = bool(op.attributes.get("negate_addend"))
    shape = tuple(op.results[0].type.shape)
    if dtype == _F64:
        loop = _f64_loop()

        def multiply_add_f64(a, b, c):
            a = np.negative(a) if negate_product else a
            c = np.negative(c) if negate_addend else c
            flat = [np.ascontiguousarray(x, dtype=_F64).reshape(-1) for x in (a, b, c)]
            out = np.empty(flat[0].size, _F64)
            loop.result()(*flat, out)
            return (out.reshape(shape),)

        return multiply_add_f64
    wide = _WIDE.get(dtype)
    if wide is None:
        raise ctx.unimplemented(op, f"no multiply-add for {dtype.name}")
    combine = np.subtract if negate_addend else np.add

    def multiply_add_kernel(a, b, c):
        # an array even at rank 0 (NumPy's product of 0-d arrays is a scalar), so the rest
        # works in place on it
        product = np.asarray(np.multiply(a, b, dtype=wide))
        if negate_product:
            np.negative(product, out=product)
        result = combine(product, c, out=product, dtype=wide)
        return (np.asarray(result).astype(dtype, copy=False),)

    return multiply_add_kernel
