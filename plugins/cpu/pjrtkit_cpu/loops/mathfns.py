"""Transcendental ops in native loops.

Numba calls libm once per element for ``math.tanh`` and friends; that cannot be vectorized and
costs ~9 ns per element (4.4 us for a 8x64 tanh, three times XLA's whole RNN step). float32
``tanh`` therefore gets its own branch-free implementation here, which LLVM vectorizes; the
other transcendentals use NumPy's scalar functions in the op's dtype (the same results as the
unfused NumPy kernels).

``TANH_F32`` computes in float64: m = expm1(t / 64) from its Taylor series (t = 2|x| clamped
to 20, where tanh is 1 in float32), squared up six times with (1 + m)^2 - 1 = m (m + 2), which
keeps the relative error of small m; then tanh(|x|) = m / (m + 2), with the sign of x put back
(so -0.0 stays -0.0) and NaN passed through. The float64 error (~1e-12 relative) is far below
a float32 ulp, so the result is tanh correctly rounded or one ulp off.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.stablehlo.ir import Op

TANH_F32 = '''
@njit(inline="always")
def tanh_f32(x):
    a = min(abs(np.float64(x)) * 2.0, 20.0) * (1.0 / 64.0)
    m = a * (1.0 + a * (1.0 / 2.0) * (1.0 + a * (1.0 / 3.0) * (1.0 + a * (1.0 / 4.0) * (
        1.0 + a * (1.0 / 5.0) * (1.0 + a * (1.0 / 6.0) * (1.0 + a * (1.0 / 7.0) * (
            1.0 + a * (1.0 / 8.0) * (1.0 + a * (1.0 / 9.0)))))))))
    m = m * (m + 2.0)
    m = m * (m + 2.0)
    m = m * (m + 2.0)
    m = m * (m + 2.0)
    m = m * (m + 2.0)
    m = m * (m + 2.0)
    r = np.float32(math.copysign(m / (m + 2.0), x))
    return x if x != x else r
'''

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
    if name == "tanh" and dtype == _FLOATS[0]:
        return [f"{result} = tanh_f32({x})"]
    if name in _NUMPY_UNARY:
        return [f"{result} = {t}({_NUMPY_UNARY[name]}({x}))"]
    if name == "logistic":
        return [f"{result} = {t}({t}(1) / ({t}(np.exp(-{x})) + {t}(1)))"]
    return None


def helpers(source_lines: list[str]) -> str:
    """Module-level helper definitions the generated loop body uses."""
    text = "\n".join(source_lines)
    return TANH_F32 if "tanh_f32(" in text else ""
