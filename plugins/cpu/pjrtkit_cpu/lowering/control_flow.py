"""stablehlo.while on the cpu: in-place carry updates and native (Numba) loops.

Overrides the reference's interpreted while (``pjrtkit.reference.control_flow``, which also
holds if/case/call and the other control-flow rules the cpu backend uses as they are).
Region plans are called as ``plan(*block_args, *captures)`` and an op with regions receives
``(*operands, *captures)``, with ``captures`` in the same order (``ctx.captures(op)``).
"""
from __future__ import annotations

import numpy as np

from pjrtkit.stablehlo.ir import Region

from pjrtkit.stablehlo.inline import inline_calls_everywhere
from pjrtkit_cpu.loops.native import native_loop
from pjrtkit_cpu.loops.ownership import IN_PLACE_UPDATE, rewrite_in_place
from pjrtkit_cpu.lowering.registry import RULES


@RULES.register("stablehlo.while")
def while_(op, ctx):
    # The body's calls, those of its branches and inner loops too, are inlined (so the analyses
    # below see the ops they run) and its dynamic_update_slice ops on dying carries write in
    # place (see loops.ownership).
    cond_block = inline_calls_everywhere(op.regions[0].entry, ctx.program)
    body_block, owned = rewrite_in_place(inline_calls_everywhere(op.regions[1].entry,
                                                                 ctx.program))
    cond = ctx.compile_region(Region([cond_block]))
    body = ctx.compile_region(Region([body_block]))
    num_carried = len(op.operands)
    owned = tuple(sorted(owned))

    def kernel(*args):
        carried = args[:num_carried]
        captures = args[num_carried:]
        if owned:
            # Carries the body updates in place start as our own copies: the initial value
            # may be a caller's buffer, a folded constant or a value read again later.
            carried = list(carried)
            for p in owned:
                carried[p] = np.array(carried[p], copy=True, order="C")
        while cond(*carried, *captures)[0]:
            carried = body(*carried, *captures)
        return tuple(carried)

    return native_loop(op, ctx, cond_block, body_block, owned, kernel)


@RULES.register(IN_PLACE_UPDATE)
def dynamic_update_slice_in_place(op, ctx):
    """dynamic_update_slice into an operand the while kernel owns and nobody reads again."""
    operand_shape = op.operands[0].type.shape
    sizes = op.operands[1].type.shape
    limits = [d - s for d, s in zip(operand_shape, sizes)]

    def kernel(x, update, *starts):
        # XLA clamps each start so the whole update lands inside the operand.
        index = tuple(slice(b, b + s) for b, s in zip(
            (min(max(int(s), 0), hi) for s, hi in zip(starts, limits)), sizes))
        x[index] = update
        return (x,)

    return kernel
