"""dot_general, dot and convolution on the cpu: the reference kernels under the cpu's BLAS
thread policy (``pjrtkit_cpu.blas``): contractions of at least ``blas.WIDE_FLOPS`` may use more
BLAS threads than the one an execution runs with."""
from __future__ import annotations

import functools

from pjrtkit.reference.convolution import convolution_rule_with
from pjrtkit.reference.dot import contraction_rules

from pjrtkit_cpu import blas
from pjrtkit_cpu.lowering.registry import RULES


def blas_threads(flops: float, call_flops: float):
    """``pjrtkit.reference.dot.ThreadPolicy`` of the cpu: widen (``blas.wide``) from
    ``blas.WIDE_FLOPS`` up; smaller contractions run as they are, with no context at all."""
    if flops < blas.WIDE_FLOPS:
        return None
    return functools.partial(blas.wide, flops, call_flops)


dot_general, dot = contraction_rules(blas_threads)
RULES.register("stablehlo.dot_general")(dot_general)
RULES.register("stablehlo.dot")(dot)
RULES.register("stablehlo.convolution")(convolution_rule_with(blas_threads))
