"""The state of one native loop being generated: how each IR value lives in the Numba code.

Every tensor value is one of:

- ``scalar``: a rank-0 value, a Numba local (``expr`` is its name or a literal);
- ``splat``: a value of any shape whose elements are all one scalar (a broadcast of a scalar,
  a uniform constant); ``expr`` is that scalar, so elementwise ops on splats run once;
- ``array``: a flat C-contiguous Numba array named ``expr`` (carries, captures, constants and
  the buffers of op results, allocated once before the loop and reused every iteration).

Code goes to three places: ``prologue`` (before the loop: buffers, hoisted work),
``loop`` (the body of ``while True``) and ``helpers`` (module-level functions, e.g. dots).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from pjrtkit.stablehlo.ir import TensorType, Value

from pjrtkit_cpu.fusion import codegen

# Values computed per iteration are kept small: a native loop touches them element by element
# in scalar-typed code, where NumPy's vectorized kernels would win on big arrays.
MAX_ELEMENTS = 1 << 16
I = "    "  # one level of indentation in generated code


def strides(shape) -> list[int]:
    """Row-major element strides of ``shape``."""
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return out[::-1]


def contiguous(shape, sizes) -> bool:
    """Whether a box of ``sizes`` is one contiguous run of a row-major array of ``shape``."""
    started = False
    for dim, size in zip(shape, sizes):
        if started and size != dim:
            return False
        if size != 1:
            started = True
    return True


def module_header() -> list[str]:
    """The imports of a generated module. ``fusion.codegen.emit`` may emit calls of helpers
    its own modules import (vecmath's ``select`` and transcendentals), so its import lines are
    copied; this is the one place that reaches into the fusion code generator's module text."""
    return ["import math", "import numpy as np", "from numba import njit",
            *getattr(codegen, "_VECMATH_IMPORTS", ())]


class Unsupported(Exception):
    """The loop cannot be compiled natively (the interpreted loop runs instead)."""


@dataclasses.dataclass(frozen=True)
class Val:
    kind: str                 # "scalar" | "splat" | "array"
    expr: str
    shape: tuple[int, ...]
    dtype: np.dtype
    root: str = ""            # arrays: the storage ``expr`` views (itself unless a view)

    @property
    def storage(self) -> str:
        return self.root or self.expr

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def element(self, index: str) -> str:
        """The element at flat ``index`` as an expression."""
        return f"{self.expr}[{index}]" if self.kind == "array" else self.expr

    @staticmethod
    def uniform(expr: str, t: TensorType) -> Val:
        """One scalar ``expr`` standing for every element of a value of type ``t``."""
        return Val("scalar" if not t.shape else "splat", expr, t.shape, t.dtype)


def tensor_type(value: Value) -> TensorType:
    t = value.type
    if not isinstance(t, TensorType) or t.dtype not in codegen.DTYPES:
        raise Unsupported(f"value of type {t}")
    return t


def nb_type(dtype: np.dtype) -> str:
    return "np.bool_" if dtype == codegen.BOOL else f"np.{dtype.name}"


def literal(value, dtype: np.dtype) -> str:
    """A Numba expression of exactly ``value`` in ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype == codegen.BOOL:
        return "True" if bool(value) else "False"
    if dtype.kind in "iu":
        v = int(value)
        if v > np.iinfo(np.int64).max:
            v -= 1 << 64  # uint64 above int64's range: the cast wraps it back
        return f"np.{dtype.name}({v})"
    v = float(value)
    if math.isnan(v):
        text = "math.nan"
    elif math.isinf(v):
        text = "math.inf" if v > 0 else "-math.inf"
    else:
        text = repr(v)
    return f"np.{dtype.name}({text})"


class LoopSource:
    """Names, buffers and lines of one native loop (see the module docstring)."""

    def __init__(self):
        self.vals: dict[int, Val] = {}
        self.prologue: list[str] = []
        self.loop: list[str] = []
        self.helpers: dict[str, str] = {}
        self.constant_args: list[np.ndarray] = []
        self.invariant: set[int] = set()  # ids of values that never change during the loop
        self._names = 0

    def name(self, prefix: str) -> str:
        self._names += 1
        return f"{prefix}{self._names}"

    def get(self, value: Value) -> Val:
        try:
            return self.vals[value.id]
        except KeyError:
            raise Unsupported(f"value %{value.id} is not available in the loop") from None

    def bind(self, value: Value, val: Val) -> Val:
        self.vals[value.id] = val
        return val

    def buffer(self, shape: tuple[int, ...], dtype: np.dtype, prefix: str = "b") -> str:
        """A fresh flat array allocated once, before the loop."""
        size = math.prod(shape)
        if size > MAX_ELEMENTS:
            raise Unsupported(f"intermediate of {size} elements")
        name = self.name(prefix)
        self.prologue.append(f"{name} = np.empty({size}, {nb_type(dtype)})")
        return name

    def constant(self, array: np.ndarray, dtype: np.dtype) -> str:
        """A kernel argument holding ``array`` (flat), passed at every call."""
        name = f"k{len(self.constant_args)}"
        self.constant_args.append(np.ascontiguousarray(array, dtype=dtype).reshape(-1))
        return name

    def materialize(self, val: Val, lines: list[str], indent: str) -> Val:
        """``val`` as an array (splats and scalars are written out into a buffer)."""
        if val.kind == "array":
            return val
        name = self.buffer(val.shape or (1,), val.dtype)
        lines.append(f"{indent}for q in range({max(val.size, 1)}):")
        lines.append(f"{indent}    {name}[q] = {val.expr}")
        return Val("array", name, val.shape, val.dtype)

    def alias(self, val: Val, shape: tuple[int, ...], expr: str | None = None) -> Val:
        """An array value sharing ``val``'s storage (a reshape or a contiguous slice)."""
        return Val("array", expr or val.expr, shape, val.dtype, val.storage)
