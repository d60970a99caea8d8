"""``custom_call @dce_sink``: what ``lax.dce_sink`` emits, a side-effecting custom call with no
results that keeps its operands alive through dead-code elimination. It computes nothing (as on
XLA's CPU backend), so the rule is the same for every backend and touches no payload: the
reference registers it, and so do backends with rules of their own (the GPU plugins)."""
from __future__ import annotations

from pjrtkit.errors import InvalidArgument


def dce_sink(op, ctx):
    if op.results:
        raise InvalidArgument(f"custom_call @dce_sink returns nothing; this one has "
                              f"{len(op.results)} result(s)")

    def kernel(*_operands):
        return ()

    return kernel
