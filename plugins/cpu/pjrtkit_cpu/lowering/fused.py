"""Lowering rules for ``pjrtkit_cpu.fused_elementwise`` and ``pjrtkit_cpu.fused_rows`` (made by
``pjrtkit_cpu.fusion``)."""
from __future__ import annotations

from pjrtkit_cpu.fusion import rows
from pjrtkit_cpu.fusion.kernel import FusedKernel, stage_parts
from pjrtkit_cpu.fusion.rewrite import FUSED_OP
from pjrtkit_cpu.lowering.registry import RULES


@RULES.register(FUSED_OP)
def lower_fused_elementwise(op, ctx):
    # The region is the group's original ops: planned now, it runs until the loop compiles.
    return FusedKernel(op, ctx.compile_region(op.regions[0]))


@RULES.register(rows.ROWS_OP)
def lower_fused_rows(op, ctx):
    # The row kernel is queued first; the region (its stages as separate fused loops, which
    # queue their own compiles) runs until it is ready.
    source = rows.kernel_source(op, FUSED_OP, stage_parts)
    return rows.RowKernel(op, None, source).with_fallback(ctx.compile_region(op.regions[0]))
