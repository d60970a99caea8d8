"""Scalar expressions: the one language each elementwise op's meaning is written in.

An ``Expr`` is one scalar operation on expressions of known element types (a DAG: shared
sub-expressions are shared objects). The operation names are one vocabulary (``SCALAR_OPS``):
StableHLO's elementwise ops by their short names (``"add"``, ``"shift_left"``, ``"maximum"``)
and the smaller operations their definitions are written in (``"div_trunc"``, ``"lshr"``,
``"trunc"``, ``"copysign"``). Each name's meaning is fixed for every dtype it takes; some are
*defined* in terms of others (``pjrtkit.semantics.definitions``), the rest are primitive.

A code generator (a *renderer*) spells the names it has code for; ``schedule`` rewrites every
other name into its definition until only spelled names (and arguments and constants) are
left, or raises ``Undefined`` naming the first operation that neither the renderer spells nor
the semantics defines. So a renderer never says what an op means, only how to write the
operations it knows; one with few spellings renders everything the definitions reach (the
shape of tinygrad's one op table that each renderer overrides).

Expressions are built with the functions below (``select``, ``lt``, ``cast``, ...) and the
arithmetic operators (``+ - * & | ^ ~ << >>`` and unary ``-``; ``>>`` is logical on unsigned
types and arithmetic on signed ones, as in C); a Python number next to an expression becomes
a constant of that expression's dtype. Comparisons are functions (``eq``, ``lt``): ``==`` is
identity, so expressions can be dictionary keys.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from pjrtkit.semantics import dtypes as D


class Undefined(Exception):
    """An operation on a dtype that a renderer cannot write: neither spelled nor defined.

    ``op`` and ``dtype`` name it; the message says why (for the UNIMPLEMENTED error)."""

    def __init__(self, op: str, dtype, why: str):
        super().__init__(why)
        self.op, self.dtype, self.why = op, dtype, why


@dataclasses.dataclass(frozen=True, eq=False)
class Expr:
    """``op`` applied to ``args``, of element type ``dtype``. ``attr``: the value of a
    ``const``, the index of an ``arg``, (direction, compare type) of a ``compare``."""

    op: str
    args: tuple[Expr, ...]
    dtype: np.dtype
    attr: object = None

    def _binary(self, other, op: str, reverse: bool = False) -> Expr:
        other = as_expr(other, self.dtype)
        a, b = (other, self) if reverse else (self, other)
        return Expr(op, (a, b), self.dtype)

    def __add__(self, other):
        return self._binary(other, "add")

    def __radd__(self, other):
        return self._binary(other, "add", True)

    def __sub__(self, other):
        return self._binary(other, "subtract")

    def __rsub__(self, other):
        return self._binary(other, "subtract", True)

    def __mul__(self, other):
        return self._binary(other, "multiply")

    def __rmul__(self, other):
        return self._binary(other, "multiply", True)

    def __truediv__(self, other):
        return self._binary(other, "divide")

    def __rtruediv__(self, other):
        return self._binary(other, "divide", True)

    def __and__(self, other):
        return self._binary(other, "and")

    def __or__(self, other):
        return self._binary(other, "or")

    def __xor__(self, other):
        return self._binary(other, "xor")

    def __lshift__(self, amount):
        return self._binary(amount, "shl")

    def __rshift__(self, amount):
        return self._binary(amount, "ashr" if D.is_signed(self.dtype) else "lshr")

    def __neg__(self):
        return Expr("negate", (self,), self.dtype)

    def __invert__(self):
        return Expr("not", (self,), self.dtype)

    def __repr__(self) -> str:
        if self.op == "arg":
            return f"x{self.attr}:{self.dtype.name}"
        if self.op == "const":
            return f"{self.attr!r}:{self.dtype.name}"
        extra = f"{list(self.attr)}" if isinstance(self.attr, tuple) else ""
        return f"{self.op}{extra}({', '.join(map(repr, self.args))})"


def arg(index: int, dtype) -> Expr:
    """The ``index``-th operand of the op being defined."""
    return Expr("arg", (), np.dtype(dtype), index)


def const(value, dtype) -> Expr:
    """``value`` in ``dtype`` (an int wraps to an integer type's bits)."""
    dtype = np.dtype(dtype)
    if dtype == D.BOOL:
        value = bool(value)
    elif D.is_int(dtype):
        low, high = D.int_range(dtype)
        value = (int(value) - low) % (high - low + 1) + low
    elif D.is_complex(dtype):
        value = complex(value)
    else:
        value = float(value)
    return Expr("const", (), dtype, value)


def as_expr(value, dtype) -> Expr:
    return value if isinstance(value, Expr) else const(value, dtype)


def apply(op: str, *args, dtype=None, attr=None) -> Expr:
    """``op`` on ``args`` (the first must be an Expr; numbers become constants of its dtype);
    the result's dtype is ``dtype`` or the first operand's."""
    first = args[0].dtype
    exprs = tuple(as_expr(a, first) for a in args)
    return Expr(op, exprs, np.dtype(dtype) if dtype is not None else first, attr)


def select(predicate: Expr, on_true, on_false, dtype=None) -> Expr:
    """``on_true`` where ``predicate`` holds, else ``on_false`` (both are computed); the
    result's dtype is ``dtype`` or that of the side that is an expression."""
    if dtype is None:
        kind = on_true if isinstance(on_true, Expr) else on_false
        if not isinstance(kind, Expr):
            raise TypeError("select of two numbers needs their dtype")
        dtype = kind.dtype
    dtype = np.dtype(dtype)
    return Expr("select", (predicate, as_expr(on_true, dtype), as_expr(on_false, dtype)), dtype)


def _comparison(direction: str) -> Callable[[Expr, object], Expr]:
    def compare(a: Expr, b) -> Expr:
        return Expr("compare", (a, as_expr(b, a.dtype)), D.BOOL, (direction, "NOTYPE"))
    compare.__name__ = direction.lower()
    compare.__doc__ = (f"``a {direction} b`` as a bool: IEEE for floats (unordered is false, "
                       f"except NE), by the dtype's signedness for integers.")
    return compare


eq, ne, lt, le, gt, ge = (_comparison(d) for d in ("EQ", "NE", "LT", "LE", "GT", "GE"))


def logical_and(a: Expr, b: Expr) -> Expr:
    return Expr("and", (a, b), D.BOOL)


def logical_or(a: Expr, b: Expr) -> Expr:
    return Expr("or", (a, b), D.BOOL)


def cast(x: Expr, dtype) -> Expr:
    """``x`` as a value of ``dtype`` (the primitive ``cast`` of SCALAR_OPS: a float becomes an
    integer only where its truncated value is in range; StableHLO's ``convert`` is defined
    in terms of it)."""
    dtype = np.dtype(dtype)
    return x if x.dtype == dtype else Expr("cast", (x,), dtype)


def bitcast(x: Expr, dtype) -> Expr:
    """``x``'s bits read as ``dtype`` (same storage width)."""
    dtype = np.dtype(dtype)
    return x if x.dtype == dtype else Expr("bitcast", (x,), dtype)


def is_nan(x: Expr) -> Expr:
    return ne(x, x)


# Every scalar operation name and its meaning. "Defined" ones have a definition in
# ``definitions`` for the dtypes listed there; the rest are primitive: a renderer must spell
# them (or decline the ops that need them).
SCALAR_OPS: dict[str, str] = {
    "arg": "an operand of the op being defined (attr: its index)",
    "const": "a constant (attr: its value, already in the dtype's range)",
    "add": "a + b: integers wrap (two's complement); floats round to nearest even",
    "subtract": "a - b: integers wrap; floats IEEE",
    "multiply": "a * b: integers wrap (the low bits of the product); floats IEEE",
    "multiply_add": "a * b + c rounded once (C fma), floats",
    "divide": "a / b for floats (IEEE: x/0 is inf or NaN); defined for complex numbers",
    "cdiv": "complex a / b, exact for finite operands (NaN and infinities: see divide)",
    "negate": "-a: integers wrap (INT_MIN stays INT_MIN); floats flip the sign bit",
    "div_trunc": "integer a / b rounded toward zero; only for b != 0 and not INT_MIN / -1",
    "rem_trunc": "integer a - b * div_trunc(a, b), the sign of a; same domain as div_trunc",
    "and": "bitwise and (logical for bool)",
    "or": "bitwise or (logical for bool)",
    "xor": "bitwise xor (logical for bool)",
    "not": "bitwise not (logical for bool)",
    "shl": "a << b for 0 <= b < the storage width",
    "lshr": "a >> b shifting in zeros, for 0 <= b < the storage width",
    "ashr": "a >> b shifting in copies of the sign bit (signed types), 0 <= b < storage width",
    "compare": "a <direction> b as a bool, attr (direction, compare type): with compare type "
               "NOTYPE (or the one the dtype implies: FLOAT, SIGNED, UNSIGNED) IEEE for floats "
               "(unordered is false except for NE), by the dtype's signedness for integers, "
               "only EQ/NE for complex; other compare types are defined by a rewrite",
    "select": "args[1] where args[0] holds, else args[2]",
    "cast": "the value in the result dtype: integers wrap to its bits; to a float or "
            "complex type rounds to nearest even (overflow to inf); a float to an integer "
            "only where the value truncated toward zero is in range; bool is 0 or 1; a "
            "number to bool is not a cast (compare with 0)",
    "bitcast": "the same bits read as the result dtype (same storage width)",
    "real": "the real part of a complex number", "imag": "the imaginary part",
    "make_complex": "the complex number args[0] + args[1] i",
    # C99's <math.h> (Annex F; Annex G for complex arguments): the function, correctly
    # rounded or within the dtype's tolerance (pjrtkit.testing.tolerances).
    "fabs": "|a| (C fabs; the magnitude of a complex number, C cabs, is complex abs)",
    "floor": "C floor", "ceil": "C ceil", "trunc": "C trunc (toward zero)",
    "rint": "C rint in round-to-nearest-even mode (halfway cases to even)",
    "round": "C round (halfway cases away from zero)",
    "sqrt": "C sqrt / csqrt", "cbrt": "C cbrt", "exp": "C exp / cexp", "expm1": "C expm1",
    "log": "C log / clog", "log1p": "C log1p", "sin": "C sin / csin", "cos": "C cos / ccos",
    "tan": "C tan / ctan", "tanh": "C tanh / ctanh", "atan": "C atan",
    "atan2": "C atan2 (a is y, b is x)", "pow": "C pow / cpow", "fmod": "C fmod",
    "hypot": "C hypot", "copysign": "C copysign",
    "popcount": "the number of set bits of an integer's storage",
    "clz": "the number of leading zero bits of an integer's storage",
}
# The StableHLO elementwise ops are scalar operations too (``definitions.STABLEHLO``).


def schedule(root: Expr, spells: Callable[[Expr], bool],
             define: Callable[[Expr], Expr | None], renderer: str) -> list[Expr]:
    """The operations computing ``root``, each after its arguments and each once, using only
    operations ``spells`` accepts (and ``arg``/``const``): any other is replaced by
    ``define(node)``, recursively. Raises ``Undefined`` for an operation that is neither
    spelled nor defined. The last node computes ``root``."""
    order: list[Expr] = []
    memo: dict[int, Expr] = {}
    keep: list[Expr] = []  # holds every visited node, so that no id() is reused meanwhile

    def visit(node: Expr) -> Expr:
        found = memo.get(id(node))
        if found is not None:
            return found
        keep.append(node)
        if node.op in ("arg", "const") or spells(node):
            args = tuple(visit(a) for a in node.args)
            result = node if all(n is o for n, o in zip(args, node.args)) else Expr(
                node.op, args, node.dtype, node.attr)
            order.append(result)
        else:
            definition = define(node)
            if definition is None:
                raise Undefined(node.op, node.dtype,
                                f"{renderer} has no code for {node.op} on {node.dtype.name} "
                                f"and pjrtkit.semantics defines it in no other terms")
            result = visit(definition)
        memo[id(node)] = result
        return result

    visit(root)
    return order
