"""Lowering rules for ``pjrtkit_cpu.fused_elementwise`` and ``pjrtkit_cpu.fused_rows`` (made by
``pjrtkit_cpu.fusion``)."""
from __future__ import annotations

from pjrtkit_cpu.contraction import contract_region
from pjrtkit_cpu.fusion import cache, rows
from pjrtkit_cpu.fusion.kernel import FusedKernel, stage_parts
from pjrtkit_cpu.fusion.rewrite import FUSED_OP
from pjrtkit_cpu.lowering.registry import RULES


@RULES.register(FUSED_OP)
def lower_fused_elementwise(op, ctx):
    # The region is the group's original ops: planned now, it runs until the loop compiles
    # (multiply-adds rounded once, as the loop rounds them: pjrtkit_cpu.contraction).
    return FusedKernel(op, ctx.compile_region(contract_region(op.regions[0])))


@RULES.register(rows.ROWS_OP)
def lower_fused_rows(op, ctx):
    # The row kernel is queued first; the region (its stages as separate fused loops, which
    # queue their own compiles) runs until it is ready.
    try:
        source = rows.kernel_source(op, FUSED_OP, stage_parts)
    except Exception as exc:  # noqa: BLE001 - a program the generator cannot handle
        cache.report_fallback(f"generating the row program {op.describe()}", exc,
                              "its fused loops run separately")
        return ctx.compile_region(op.regions[0])
    return rows.RowKernel(op, None, source).with_fallback(ctx.compile_region(op.regions[0]))
