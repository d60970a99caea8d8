"""Memory hints for row programs (``rows``): software prefetch of a later row.

A row program computes on a row from L1 for several stages in turn; while it does, the
hardware prefetcher sees no new misses and stops running ahead, so the next row's first stage
waits for memory (measured: layernorm f32[4096,1024] 1.7 ms without, 1.5 ms prefetching four
rows ahead). ``prefetch`` emits LLVM's prefetch intrinsic (read, high locality, data cache);
it never faults and has no effect on results.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, array, index):
    """Hint that ``array[index]`` (any index: nothing is read) will be read soon."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        array_type, index_type = signature.args
        data = context.make_array(array_type)(context, builder, args[0]).data
        offset = context.cast(builder, args[1], index_type, types.intp)
        address = builder.bitcast(builder.gep(data, [offset]), ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [address.type, i32, i32, i32]),
            "llvm.prefetch.p0")
        builder.call(function, [address, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(array, index), codegen
