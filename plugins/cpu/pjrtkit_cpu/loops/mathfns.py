"""Transcendental ops in native loops that the fused-loop code generator leaves out.

``fusion.codegen.emit`` (tried first) turns float32 exp/log/log1p/expm1/tanh/logistic into
calls of ``pjrtkit_cpu.vecmath``'s vectorizable versions. The rest (float64, and float32
sine/cosine/tan/cbrt) are NumPy's scalar functions in the op's dtype here: the same results as
the unfused NumPy kernels, at one libm call per element.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.stablehlo.ir import Op

_NUMPY_UNARY = {
    "exponential": "np.exp", "exponential_minus_one": "np.expm1", "log": "np.log",
    "log_plus_one": "np.log1p", "tanh": "np.tanh", "sine": "np.sin", "cosine": "np.cos",
    "tan": "np.tan", "cbrt": "np.cbrt",
}
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def emit(op: Op, names: list[str], result: str) -> list[str] | None:
    """Statements for a transcendental op, or None (not one of ours)."""
    name = op.name.removeprefix("stablehlo.")
    if len(op.operands) != 1 or len(op.results) != 1:
        return None
    dtype = op.results[0].type.dtype
    if dtype not in _FLOATS or op.operands[0].type.dtype != dtype:
        return None
    t = f"np.{dtype.name}"
    x = names[0]
    if name in _NUMPY_UNARY:
        return [f"{result} = {t}({_NUMPY_UNARY[name]}({x}))"]
    if name == "logistic":
        return [f"{result} = {t}({t}(1) / ({t}(np.exp(-{x})) + {t}(1)))"]
    return None
