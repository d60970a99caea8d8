"""The state of one native loop being generated: how each IR value lives in the Numba code.

A native loop's values use three of the homes of ``loopnest.values``, and one of its own:

- ``scalar``: a rank-0 value, a Numba local (``expr`` is its name or a literal);
- ``splat``: a value of any shape whose elements are all one scalar (a broadcast of a scalar,
  a uniform constant); ``expr`` is that scalar, so elementwise ops on splats run once;
- ``array``: a flat C-contiguous Numba array named ``expr`` (carries, captures, constants and
  the buffers of op results, allocated once before the loop and reused every iteration);
- ``chained``: an elementwise result whose single reader is a later elementwise op of its
  block (``ops.chainable_values``): it gets no buffer and no loop of its own; its per-element statements
  (``LoopSource.chained_code``) run inside the reader's loop, so ``v * a + b`` over an array
  is one pass instead of two passes and a buffer.

Code goes to three places: ``prologue`` (before the loop: buffers, hoisted work), the lines
each rule is handed (the cond or body of ``while True``, or an if/case arm) and ``helpers``
(module-level functions, e.g. dots).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from pjrtkit.stablehlo.ir import Op, TensorType, Value

from pjrtkit_cpu.loopnest import optable
from pjrtkit_cpu.loopnest.values import DTYPES, scalar_type

# Values computed per iteration are kept small: a native loop touches them element by element
# in scalar-typed code, where NumPy's vectorized kernels would win on big arrays.
MAX_ELEMENTS = 1 << 16
INDENT = "    "  # one level of indentation in generated code


class Unsupported(Exception):
    """The loop cannot be compiled natively (the interpreted loop runs instead)."""


@dataclasses.dataclass(frozen=True)
class Val:
    kind: str                 # "scalar" | "splat" | "array" | "chained"
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
    if not isinstance(t, TensorType) or t.dtype not in DTYPES:
        raise Unsupported(f"value of type {t}")
    return t


def element_lines(op: Op, names: list[str], result: str) -> list[str]:
    """The op table's statements for one element of ``op``; per-element libm calls are
    allowed (``vectorized=False``: the alternative is the interpreted loop)."""
    body = optable.emit(op, names, result, vectorized=False)
    if body is None:
        raise Unsupported(op.describe())
    return body


class LoopSource:
    """Names, buffers and lines of one native loop (see the module docstring).

    ``emit_op(src, op, lines)`` is the driver's dispatch: rules of ops with regions (if/case,
    fused groups) emit their inner ops through it."""

    def __init__(self, emit_op: Callable[[LoopSource, Op, list[str]], None]):
        self.emit_op = emit_op
        self.vals: dict[int, Val] = {}
        self.prologue: list[str] = []
        self.helpers: dict[str, str] = {}
        self.constant_args: list[np.ndarray] = []
        self.invariant: set[int] = set()  # ids of values that never change during the loop
        self.chainable: set[int] = set()  # ids of results to chain (``ops.chainable_values``)
        # a chained value's name -> its per-element statements (loads included), index ``q``
        self.chained_code: dict[str, list[str]] = {}
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
        self.prologue.append(f"{name} = np.empty({size}, {scalar_type(dtype)})")
        return name

    def constant(self, array: np.ndarray, dtype: np.dtype) -> str:
        """A kernel argument holding ``array`` (flat), passed at every call."""
        name = f"k{len(self.constant_args)}"
        self.constant_args.append(np.ascontiguousarray(array, dtype=dtype).reshape(-1))
        return name

    def alias(self, val: Val, shape: tuple[int, ...], expr: str | None = None) -> Val:
        """An array value sharing ``val``'s storage (a reshape or a contiguous slice)."""
        return Val("array", expr or val.expr, shape, val.dtype, val.storage)

