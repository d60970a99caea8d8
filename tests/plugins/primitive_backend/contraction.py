"""Contraction: dot_general as one batched matmul (float16 and bfloat16 accumulated in float32).

The expansions build convolutions, fft and linear algebra from it.
"""
from __future__ import annotations

import math

import numpy as np

from .payloads import BF16, F16, F32, RULES, kernel, result_type


@RULES.register("stablehlo.dot_general")
def dot_general(op, ctx):
    dn = op.attributes["dot_dimension_numbers"]
    out = result_type(op)
    lhs_free, rhs_free = dn.free_dimensions(op.operands[0].type.rank, op.operands[1].type.rank)
    wide = F32 if out.dtype in (F16, BF16) else out.dtype

    def run(a, b):
        a = np.transpose(a, (*dn.lhs_batching_dimensions, *lhs_free,
                             *dn.lhs_contracting_dimensions)).astype(wide)
        b = np.transpose(b, (*dn.rhs_batching_dimensions, *dn.rhs_contracting_dimensions,
                             *rhs_free)).astype(wide)
        nb = len(dn.lhs_batching_dimensions)
        batch, m = a.shape[:nb], math.prod(a.shape[nb:nb + len(lhs_free)])
        k = math.prod(a.shape[nb + len(lhs_free):])
        n = math.prod(b.shape[nb + len(dn.rhs_contracting_dimensions):])
        product = np.matmul(a.reshape(*batch, m, k), b.reshape(*batch, k, n))
        return (product.reshape(out.shape).astype(out.dtype),)
    return kernel(run)

