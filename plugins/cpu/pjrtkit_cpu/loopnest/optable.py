"""The op table: one Numba code-generation rule per StableHLO op, for every driver.

A rule turns one application of an op into scalar statements: given the expressions of one
element of each operand (``Element.args``), it returns the lines assigning the result element
to the local ``Element.result``. The semantics are XLA's CPU backend's, as the NumPy kernels
(``lowering/elementwise_tables.py``) implement them for whole arrays:

- integer results are cast back to their declared dtype after every op (Numba promotes small
  integers to 64 bits, so the cast is what makes arithmetic wrap in the declared width), and
  wrapping arithmetic runs on the unsigned type (Numba marks signed arithmetic no-signed-wrap);
- shift amounts are read as unsigned, amounts >= the width give 0 (or the sign fill); integer
  division truncates, x/0 is all ones, x%0 is x, INT_MIN/-1 wraps;
- float->int conversion saturates with NaN -> 0; maximum/minimum propagate NaN and order -0.0
  below +0.0; clamp is maximum then minimum with those semantics;
- choices between computed values are ``select`` (an LLVM select from ``vecmath``), not
  branches, so loops vectorize.

Each rule declares the dtypes it has code for (``OpRule.dtypes``, of the operand named by
``OpRule.typed_operand``; every operand and result must also be one of ``values.DTYPES``).
Constants are not in the table: fused groups read them as literal inputs (``values.literal``)
and native loops bind them as literals or constant arguments. An op or dtype the table lacks
gives ``None``: the driver declines to the NumPy rule, it never
emits code it is not sure of. ``OpRule.libm_dtypes`` are the dtypes for which the rule calls
libm once per element (float64 transcendentals; float32 sine/cosine/tan/cbrt): measured 5-60x
slower than NumPy's SIMD loops, so fused loops (``vectorized=True``) decline them, while native
loops, where the alternative is an interpreted loop, take them. float32 exp/log/log1p/expm1/
tanh/logistic call ``pjrtkit_cpu.vecmath``'s vectorizable versions (imported by
``module.HEADER`` as ``vm_<op>``).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from pjrtkit.stablehlo.ir import Op, TensorType

from pjrtkit_cpu.loopnest.values import (BOOL, DTYPES, FLOAT_DTYPES, INT_DTYPES, literal,
                                          scalar_type, signed, unsigned)

PREFIX = "stablehlo."
FLOATS = FLOAT_DTYPES
INTS = INT_DTYPES
NUMBERS = FLOAT_DTYPES | INT_DTYPES


@dataclasses.dataclass(frozen=True)
class Element:
    """One application of an op in scalar code: operand element expressions ``args`` of
    dtypes ``dtypes``, a result of dtype ``out`` assigned to the local ``result``."""

    args: tuple[str, ...]
    dtypes: tuple[np.dtype, ...]
    out: np.dtype
    result: str
    attributes: dict

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the first operand (the result's, for ops without operands)."""
        return self.dtypes[0] if self.dtypes else self.out

    @property
    def t(self) -> str:
        return scalar_type(self.dtype)


@dataclasses.dataclass(frozen=True)
class OpRule:
    """The code-generation rule of one op (see the module docstring)."""

    op: str
    emit: Callable[[Element], list[str] | None]
    dtypes: frozenset
    arity: tuple[int, ...]
    typed_operand: int = 0
    libm_dtypes: frozenset = frozenset()
    same_operand_dtypes: bool = True


OP_TABLE: dict[str, OpRule] = {}


def _rule(names, dtypes, arity, **options):
    """Registers the decorated function as the rule of each op in ``names`` (short names)."""
    def register(function):
        for name in names.split():
            op = PREFIX + name
            assert op not in OP_TABLE, f"two rules for {op}"
            OP_TABLE[op] = OpRule(op, _bind(function, name), frozenset(dtypes), arity,
                                  **options)
        return function
    return register


def _bind(function, name):
    def emit(e: Element):
        return function(name, e)
    emit.__name__ = f"{function.__name__}[{name}]"
    return emit


# -- arithmetic ------------------------------------------------------------------------------
_FLOAT_OPERATORS = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}
_INT_OPERATORS = {"add": "+", "subtract": "-", "multiply": "*", "and": "&", "or": "|",
                  "xor": "^"}
_BOOL_OPERATORS = {"add": "or", "multiply": "and", "maximum": "or", "minimum": "and",
                   "and": "and", "or": "or", "xor": "!="}


@_rule("add subtract multiply", DTYPES, (2,))
def _arithmetic(name, e):
    r, (x, y), t = e.result, e.args, e.t
    if e.dtype in FLOATS:
        return [f"{r} = {t}({x} {_FLOAT_OPERATORS[name]} {y})"]
    if e.dtype == BOOL:
        return None if name == "subtract" else [f"{r} = {x} {_BOOL_OPERATORS[name]} {y}"]
    u = scalar_type(unsigned(e.dtype))
    return [f"{r} = {t}({u}({u}({x}) {_INT_OPERATORS[name]} {u}({y})))"]


@_rule("and or xor", INTS | {BOOL}, (2,))
def _bitwise(name, e):
    r, (x, y) = e.result, e.args
    if e.dtype == BOOL:
        return [f"{r} = {x} {_BOOL_OPERATORS[name]} {y}"]
    return [f"{r} = {e.t}({x} {_INT_OPERATORS[name]} {y})"]


@_rule("not", INTS | {BOOL}, (1,))
def _not(name, e):
    x = e.args[0]
    return [f"{e.result} = not {x}" if e.dtype == BOOL else f"{e.result} = {e.t}(~{x})"]


def _int_negated(e: Element, x: str) -> str:
    u = scalar_type(unsigned(e.dtype))
    return f"{e.t}({u}({u}(0) - {u}({x})))"


@_rule("negate", NUMBERS, (1,))
def _negate(name, e):
    x = e.args[0]
    return [f"{e.result} = -{x}" if e.dtype in FLOATS else f"{e.result} = {_int_negated(e, x)}"]


@_rule("abs", NUMBERS, (1,))
def _abs(name, e):
    r, x = e.result, e.args[0]
    if e.dtype in FLOATS:
        return [f"{r} = {e.t}(abs({x}))"]
    if e.dtype.kind == "u":
        return [f"{r} = {x}"]
    return [f"{r} = {_int_negated(e, x)} if {x} < 0 else {x}"]  # INT_MIN stays INT_MIN


@_rule("sign", NUMBERS, (1,))
def _sign(name, e):
    r, x, t = e.result, e.args[0], e.t
    if e.dtype in FLOATS:  # keeps -0.0 and NaN, like XLA
        return [f"{r} = {x} if ({x} == 0 or {x} != {x}) else ({t}(1) if {x} > 0 else {t}(-1))"]
    if e.dtype.kind == "i":
        return [f"{r} = {t}(1) if {x} > 0 else ({t}(-1) if {x} < 0 else {t}(0))"]
    return [f"{r} = {t}(1) if {x} > 0 else {t}(0)"]


def _float_extremum(name: str, r: str, x: str, y: str) -> list[str]:
    bigger, smaller = (x, y) if name == "maximum" else (y, x)
    # Equal values: only zeros can differ (in sign); maximum prefers +0, minimum -0, and for
    # zeros x + y is +0 unless both are -0 (so -(-x - y) is -0 unless both are +0).
    tie = f"{x} + {y}" if name == "maximum" else f"-(-{x} - {y})"
    return [f"{r}_t = select({x} == 0, {tie}, {x})",
            f"{r} = select({x} != {x}, {x}, select({y} != {y}, {y}, select({x} > {y}, "
            f"{bigger}, select({y} > {x}, {smaller}, {r}_t))))"]


def _extremum(name: str, e: Element, r: str, x: str, y: str) -> list[str]:
    if e.dtype in FLOATS:
        return _float_extremum(name, r, x, y)
    if e.dtype == BOOL:
        return [f"{r} = {x} {_BOOL_OPERATORS[name]} {y}"]
    return [f"{r} = {x} if {x} {'>' if name == 'maximum' else '<'} {y} else {y}"]


@_rule("maximum minimum", DTYPES, (2,))
def _maximum_minimum(name, e):
    return _extremum(name, e, e.result, *e.args)


@_rule("clamp", NUMBERS, (3,), typed_operand=1)
def _clamp(name, e):
    """clamp(lo, x, hi) = minimum(maximum(x, lo), hi)."""
    low, x, high = e.args
    return (_extremum("maximum", e, f"{e.result}_c", x, low)
            + _extremum("minimum", e, e.result, f"{e.result}_c", high))


@_rule("divide", NUMBERS, (2,))
def _divide(name, e):
    r, (x, y), t = e.result, e.args, e.t
    if e.dtype in FLOATS:
        return [f"{r} = {t}({x} / {y})"]
    if e.dtype.kind == "u":  # x/0 = all ones
        ones = f"{t}({(1 << 8 * e.dtype.itemsize) - 1})"
        return [f"{r} = {ones} if {y} == 0 else {t}({x} // {y})"]
    # truncating; x/0 = -1 (all ones); INT_MIN/-1 wraps
    return [f"if {y} == 0:", f"    {r} = {t}(-1)",
            f"elif {y} == -1:", f"    {r} = {_int_negated(e, x)}",
            "else:", f"    {r}_q = {x} // {y}",
            f"    if {x} % {y} != 0 and (({x} < 0) != ({y} < 0)):",
            f"        {r}_q += 1",
            f"    {r} = {t}({r}_q)"]


@_rule("remainder", INTS, (2,))
def _remainder(name, e):
    r, (x, y), t = e.result, e.args, e.t
    if e.dtype.kind == "u":  # x%0 = x
        return [f"{r} = {x} if {y} == 0 else {t}({x} % {y})"]
    # sign of the dividend; x%0 = x; INT_MIN%-1 = 0
    return [f"if {y} == 0:", f"    {r} = {x}",
            f"elif {y} == -1:", f"    {r} = {t}(0)",
            "else:", f"    {r}_m = {x} % {y}",
            f"    if {r}_m != 0 and (({r}_m < 0) != ({x} < 0)):",
            f"        {r}_m -= {y}",
            f"    {r} = {t}({r}_m)"]


@_rule("shift_left shift_right_logical shift_right_arithmetic", INTS, (2,))
def _shift(name, e):
    # Selects rather than branches, and the amount masked to the width so the unselected
    # shift is defined too.
    r, (x, y), t = e.result, e.args, e.t
    width = 8 * e.dtype.itemsize
    u = scalar_type(unsigned(e.dtype))
    if name == "shift_right_arithmetic":  # amounts >= width fill with the sign bit
        s = scalar_type(signed(e.dtype))
        return [f"{r}_n = {u}({y})",
                f"{r}_n = select({r}_n > {width - 1}, {u}({width - 1}), {r}_n)",
                f"{r} = {t}({s}({s}({x}) >> np.int64({r}_n)))"]
    op = "<<" if name == "shift_left" else ">>"
    return [f"{r}_n = {u}({y})",
            f"{r} = select({r}_n >= {width}, {t}(0), "
            f"{t}({u}({u}({x}) {op} ({r}_n & {u}({width - 1})))))"]


# -- float functions -------------------------------------------------------------------------
_ROUNDING_CALLS = {"floor": "np.floor", "ceil": "np.ceil", "round_nearest_even": "np.rint",
                   "sqrt": "np.sqrt"}


@_rule("floor ceil round_nearest_even sqrt", FLOATS, (1,))
def _float_call(name, e):
    return [f"{e.result} = {e.t}({_ROUNDING_CALLS[name]}({e.args[0]}))"]


@_rule("rsqrt", FLOATS, (1,))
def _rsqrt(name, e):
    t = e.t
    return [f"{e.result} = {t}({t}(1) / {t}(np.sqrt({e.args[0]})))"]


@_rule("round_nearest_afz", FLOATS, (1,))
def _round_afz(name, e):
    r, x = e.result, e.args[0]
    return [f"{r} = np.trunc({x})",
            f"if abs({x} - {r}) >= 0.5:",
            f"    {r} = {e.t}({r} + math.copysign(1.0, {x}))"]


@_rule("is_finite", FLOATS, (1,))
def _is_finite(name, e):
    return [f"{e.result} = ({e.args[0]} - {e.args[0]}) == 0"]


# float32 transcendentals with a vectorizable version in ``pjrtkit_cpu.vecmath`` (imported by
# ``module.HEADER`` as ``vm_<op>``; a test checks it against vecmath.FLOAT32_FUNCTIONS).
FLOAT32_TRANSCENDENTALS = {
    "exponential": "exp_f32", "log": "log_f32", "log_plus_one": "log1p_f32",
    "exponential_minus_one": "expm1_f32", "tanh": "tanh_f32", "logistic": "logistic_f32",
}
_LIBM_CALLS = {
    "exponential": "np.exp", "exponential_minus_one": "np.expm1", "log": "np.log",
    "log_plus_one": "np.log1p", "tanh": "np.tanh", "sine": "np.sin", "cosine": "np.cos",
    "tan": "np.tan", "cbrt": "np.cbrt",
}
_F32 = np.dtype(np.float32)


@_rule("exponential exponential_minus_one log log_plus_one tanh logistic", FLOATS, (1,),
       libm_dtypes=FLOATS - {_F32})
@_rule("sine cosine tan cbrt", FLOATS, (1,), libm_dtypes=FLOATS)
def _transcendental(name, e):
    r, x, t = e.result, e.args[0], e.t
    if e.dtype == _F32 and name in FLOAT32_TRANSCENDENTALS:
        return [f"{r} = vm_{name}({x})"]
    if name == "logistic":
        return [f"{r} = {t}({t}(1) / ({t}(np.exp(-{x})) + {t}(1)))"]
    return [f"{r} = {t}({_LIBM_CALLS[name]}({x}))"]


# -- comparisons, choices, conversions -------------------------------------------------------
_COMPARISONS = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


@_rule("compare", DTYPES, (2,))
def _compare(name, e):
    direction = e.attributes.get("comparison_direction")
    compare_type = e.attributes.get("compare_type", "NOTYPE")
    if direction not in _COMPARISONS:
        return None
    a, b = e.args
    if compare_type in ("SIGNED", "UNSIGNED"):
        if e.dtype in INTS:
            view = scalar_type(signed(e.dtype) if compare_type == "SIGNED"
                               else unsigned(e.dtype))
            a, b = f"{view}({a})", f"{view}({b})"
        elif e.dtype != BOOL:
            return None
    elif compare_type == "FLOAT":
        if e.dtype not in FLOATS:
            return None
    elif compare_type != "NOTYPE":  # TOTALORDER and anything newer: the NumPy rule
        return None
    return [f"{e.result} = {a} {_COMPARISONS[direction]} {b}"]


@_rule("select", DTYPES, (3,), typed_operand=1, same_operand_dtypes=False)
def _select(name, e):
    if e.dtypes[0] != BOOL or e.dtypes[1] != e.dtypes[2]:
        return None
    t = scalar_type(e.out)
    pred, x, y = e.args
    return [f"{e.result} = select({pred}, {t}({x}), {t}({y}))"]


@_rule("convert", DTYPES, (1,), same_operand_dtypes=False)
def _convert(name, e):
    r, x, source, target = e.result, e.args[0], e.dtype, e.out
    t = scalar_type(target)
    if target == BOOL:
        return [f"{r} = {x} != 0"]  # NaN -> True, like XLA
    if source == BOOL:
        return [f"{r} = {t}(1) if {x} else {t}(0)"]
    if source in FLOATS and target in INTS:  # saturating, NaN -> 0
        info = np.iinfo(target)
        width = 8 * target.itemsize
        low = -(2.0 ** (width - 1)) if target.kind == "i" else 0.0
        high = 2.0 ** (width - (1 if target.kind == "i" else 0))
        return [f"if {x} != {x}:", f"    {r} = {t}(0)",
                f"elif {x} <= {low!r}:", f"    {r} = {literal(info.min, target)}",
                f"elif {x} >= {high!r}:", f"    {r} = {literal(info.max, target)}",
                "else:", f"    {r} = {t}({x})"]
    return [f"{r} = {t}({x})"]  # int->int wraps, int->float and float->float round once


# -- the entry point -------------------------------------------------------------------------

def rule_for(op: Op, vectorized: bool = True) -> OpRule | None:
    """The rule emitting ``op``, or None when the table has no code for it (its name, arity,
    dtypes, or, with ``vectorized``, a per-element libm call)."""
    rule = OP_TABLE.get(op.name)
    if rule is None or len(op.operands) not in rule.arity or len(op.results) != 1 or op.regions:
        return None
    types = [v.type for v in (*op.operands, *op.results)]
    if not all(isinstance(t, TensorType) and t.dtype in DTYPES for t in types):
        return None
    dtype = (op.operands[rule.typed_operand] if op.operands else op.results[0]).type.dtype
    if dtype not in rule.dtypes or (vectorized and dtype in rule.libm_dtypes):
        return None
    if rule.same_operand_dtypes and any(v.type.dtype != dtype for v in op.operands):
        return None
    return rule


def emit(op: Op, args: list[str], result: str, vectorized: bool = True) -> list[str] | None:
    """Statements assigning one element of ``op``'s result to the local ``result`` from the
    operand element expressions ``args``; None when the table cannot emit ``op`` (the driver
    then leaves it to the NumPy rules). ``vectorized``: decline per-element libm calls."""
    rule = rule_for(op, vectorized)
    if rule is None:
        return None
    element = Element(tuple(args), tuple(v.type.dtype for v in op.operands),
                      op.results[0].type.dtype, result, op.attributes)
    return rule.emit(element)


def supports(op: Op, vectorized: bool = True) -> bool:
    """Whether ``emit`` has code for ``op``."""
    return emit(op, [f"a{i}" for i in range(len(op.operands))], "r", vectorized) is not None
