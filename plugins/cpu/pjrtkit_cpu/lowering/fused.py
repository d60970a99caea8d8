"""Lowering rule for ``pjrtkit_cpu.fused_elementwise`` (made by ``pjrtkit_cpu.fusion``)."""
from __future__ import annotations

from pjrtkit_cpu.fusion.kernel import FusedKernel
from pjrtkit_cpu.fusion.rewrite import FUSED_OP
from pjrtkit_cpu.lowering.registry import RULES


@RULES.register(FUSED_OP)
def lower_fused_elementwise(op, ctx):
    # The region is the group's original ops: planned now, it runs until the loop compiles.
    return FusedKernel(op, ctx.compile_region(op.regions[0]))
