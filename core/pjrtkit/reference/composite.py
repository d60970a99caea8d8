"""stablehlo.composite: run the op's decomposition function.

jaxlib serializes CHLO ops (erf, asinh, top_k, ...) for plugins as composites whose
``decomposition`` is a private function of plain StableHLO; running that function is exactly
the op's meaning.
"""
from pjrtkit.reference.registry import REFERENCE


@REFERENCE.register("stablehlo.composite")
def composite(op, ctx):
    return ctx.compile_function(op.attributes["decomposition"])
