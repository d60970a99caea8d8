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


def rank0_expr(val: Val, what: str) -> str:
    """The expression of a rank-0 value's element, wherever it lives (a local, or a
    one-element buffer or view: a reshape of a tensor<1x...>)."""
    if val.shape != () or val.kind == "chained":
        raise Unsupported(what)
    return val.element("0")


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
        # (the lines, their length, the element count) just after ``element_loop`` wrote a
        # loop: the next one of that count written right after it continues that loop
        self._open_loop: tuple[list[str], int, int] | None = None
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

    def element_loop(self, lines: list[str], size: int, body: list[str]) -> None:
        """Append ``for q in range(size):`` and ``body``, whose statements read and write
        arrays at index ``q`` only (elementwise ops, fused groups): when the last thing in
        ``lines`` is such a loop of the same size, ``body`` continues it instead. Element q of
        the earlier body is computed before the later one reads it, so the results are the
        same; Numba's compile time grows with a kernel's loops and blocks (a sampler's loop
        body: 164 elementwise loops of two elements). A body that calls libm per element
        (``optable.calls_libm``) keeps a loop of its own: it would stop LLVM vectorizing the
        rest."""
        scalar = optable.calls_libm(body)
        last = self._open_loop
        if scalar or last is None or last[0] is not lines or last[1:] != (len(lines), size):
            lines.append(f"for q in range({size}):")
        lines.extend(INDENT + line for line in body)
        self._open_loop = None if scalar else (lines, len(lines), size)

    def constant(self, array: np.ndarray, dtype: np.dtype) -> str:
        """A kernel argument holding ``array`` (flat), passed at every call."""
        name = f"k{len(self.constant_args)}"
        self.constant_args.append(np.ascontiguousarray(array, dtype=dtype).reshape(-1))
        return name

    def alias(self, val: Val, shape: tuple[int, ...], expr: str | None = None) -> Val:
        """An array value sharing ``val``'s storage (a reshape or a contiguous slice)."""
        return Val("array", expr or val.expr, shape, val.dtype, val.storage)



def carry_updates(src: LoopSource, returned, homes: list[str], types) -> list[str]:
    """The end of a loop iteration: the ``returned`` values become the carries, carry ``p``
    living in ``homes[p]`` (a scalar local for rank 0, else a flat array). New scalars are
    computed before any carry changes, values that live in a carry's storage are staged first,
    then the arrays are copied and the scalars assigned."""
    new_scalars, staged, copies = [], [], []
    arrays = {home for home, t in zip(homes, types) if t.shape}
    for v, home, t in zip(returned, homes, types):
        val = src.get(v)
        if not t.shape:
            # (a rank-0 value computed into a one-element buffer is read out of it: a
            # scalar carry holding the buffer was Numba's "Cannot unify bool and
            # array(bool, 1d, C)", numpyro's NUTS tree building)
            new_scalars.append((home, val.element("0")))
            continue
        if val.kind == "array" and val.expr == home:
            continue  # the carry itself (passed through or updated in place)
        if val.kind == "array" and val.storage in arrays:
            stage = src.buffer(t.shape, t.dtype)
            staged += [f"for q in range({t.size}):", f"{INDENT}{stage}[q] = {val.expr}[q]"]
            val = Val("array", stage, t.shape, t.dtype)
        copies += [f"for q in range({t.size}):", f"{INDENT}{home}[q] = {val.element('q')}"]
    temps = [f"n_{target} = {expr}" for target, expr in new_scalars]
    assigns = [f"{target} = n_{target}" for target, _ in new_scalars]
    return temps + staged + copies + assigns
