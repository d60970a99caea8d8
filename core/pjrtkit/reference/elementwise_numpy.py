"""The NumPy renderer of pjrtkit.semantics: each scalar operation spelled as a NumPy call on
whole arrays, and an op's kernel built from the semantics' expression of it.

``numpy_kernel(name, operand_dtypes, result_dtype, attributes)`` asks
``pjrtkit.semantics.definitions`` for the op's expression, rewrites it (``scalar.schedule``)
into the operations spelled here, and returns a function of NumPy arrays computing it. An
expression that is one spelled operation on the operands is that NumPy function itself (a
ufunc's own fast path); others run their operations in order.

Spellings carry no meaning of their own: each computes its operation as ``scalar.SCALAR_OPS``
and the definitions say. A few spell a StableHLO op whole where NumPy does it in fewer passes
than its definition would (float maximum/minimum, float sign, is_finite, integer abs,
maximum/minimum and shifts: threefry's shift_left on 2**20 uint32 took 19 ms as its
definition's five passes, 5 ms as one), with exactly the definition's results; the drift test
(``tests/test_semantics_renderers.py``) holds every op and dtype to XLA.

Two renderer choices, not semantics: float32 exp, log, log1p, expm1, tanh and logistic are the
shared float32 expressions of ``pjrtkit.semantics.float32_functions`` (every code generator
computes them so, so a program's bits do not change when its compiled loops land), and the other
float32 transcendentals run in float64 and round once (NumPy's float32 loops are up to 2.9 ulp
off, more than XLA's CPU backend; float64's are within 0.5 ulp after the rounding,
docs/accuracy.md); and float16 ops that are one NumPy ufunc run on
float16 itself (NumPy's float16 loops compute in float32 and round once, as the definition
says), as do exact ops.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pjrtkit import elementwise_vm
from pjrtkit.semantics import definitions as S, dtypes as D, float32_functions, ops
from pjrtkit.semantics.scalar import Expr, schedule

RENDERER = "pjrtkit's NumPy rules"


# -- operations NumPy has no one function for ----------------------------------------------------

def float_sign(x):
    # XLA keeps the sign of -0.0 and of NaN; np.sign maps -0.0 to +0.0.
    r = np.sign(x)
    return np.copysign(r, x, out=r) if isinstance(r, np.ndarray) else np.copysign(r, x)


def round_half_away(x):
    # x - trunc(x) is exact, so this never double-rounds (unlike floor(x + 0.5)).
    t = np.trunc(x)
    away = np.abs(x - t) >= 0.5
    return np.where(away, t + np.sign(x), t).astype(x.dtype, copy=False)


def _splat_value(a, b):
    """The value s when exactly one of ``a``, ``b`` has a single value throughout (a stride-0
    broadcast such as ReLU's ``broadcast(0)``) and the dtype is one of NumPy's own floats;
    else None."""
    if a.dtype.kind != "f":
        return None
    a_splat = isinstance(a, np.ndarray) and a.size and not any(a.strides)
    b_splat = isinstance(b, np.ndarray) and b.size and not any(b.strides)
    if a_splat == b_splat:
        return None
    x = a if a_splat else b
    return x[(0,) * x.ndim]


def float_maximum(a, b):
    # np.maximum propagates NaN but may return either zero for equal zeros (its SIMD loops do
    # not keep the first operand); ties are settled after.
    s = _splat_value(a, b)
    if s is not None and (s != 0 or not np.signbit(s)):
        # Against a splat, only a zero s can tie. Nonzero s: no tie, np.maximum is exact. +0.0
        # (ReLU): every tie must give +0.0, and adding +0.0 turns -0.0 into +0.0 while leaving
        # every other value, NaN included, as it is. Two passes instead of the general fix-up
        # (the convnet's ReLU: about 0.5 ms instead of 4 ms).
        r = np.maximum(a, b)
        if s == 0:
            np.add(r, r.dtype.type(0), out=r)
        return r
    return _signed_zero_ties(np.maximum(a, b), a, b, np.bitwise_and)


def float_minimum(a, b):
    s = _splat_value(a, b)
    if s is not None and s != 0:  # no tie possible (see float_maximum)
        return np.minimum(a, b)
    return _signed_zero_ties(np.minimum(a, b), a, b, np.bitwise_or)


def _signed_zero_ties(r, a, b, combine_bits):
    """``r`` with each tie of +0.0 and -0.0 settled as the definition does: the sign bits of
    ``a`` and ``b`` combined (``bitwise_and``: maximum prefers +0.0; ``bitwise_or``: minimum,
    -0.0)."""
    zero = r == 0
    if zero.any():
        zero &= a == b
        bits = D.unsigned_of(r.dtype)
        fixed = combine_bits(np.asarray(a).view(bits), np.asarray(b).view(bits)).view(r.dtype)
        r = np.where(zero, fixed, r)
    return r


def signed_div_trunc(a, b):
    """Division rounded toward zero (b != 0 and no INT_MIN / -1, as div_trunc requires)."""
    q, r = np.divmod(a, b)
    # Floor and truncation differ by one when the division is inexact and the signs differ.
    q += (r != 0) & ((a ^ b) < 0)
    return q


def shift_left(a, b):
    # NumPy yields 0 for amounts >= the bit width (and negative amounts, read as unsigned),
    # as the definition says; the amount is read as unsigned so that holds for every version.
    bits = D.unsigned_of(a.dtype)
    return np.left_shift(np.asarray(a).view(bits), np.asarray(b).view(bits)).view(a.dtype)


def shift_right_logical(a, b):
    bits = D.unsigned_of(a.dtype)
    return np.right_shift(np.asarray(a).view(bits), np.asarray(b).view(bits)).view(a.dtype)


def shift_right_arithmetic(a, b):
    # The bit pattern shifted arithmetically even for unsigned types; amounts >= the width
    # (or negative, read as unsigned) fill with the sign bit: a shift by width - 1.
    signed, unsigned = D.signed_of(a.dtype), D.unsigned_of(b.dtype)
    amount = np.minimum(np.asarray(b).view(unsigned),
                        unsigned.type(8 * a.dtype.itemsize - 1)).astype(signed)
    return np.right_shift(np.asarray(a).view(signed), amount).view(a.dtype)


def popcount(x):
    return np.bitwise_count(np.asarray(x).view(D.unsigned_of(x.dtype))).astype(x.dtype)


def count_leading_zeros(x):
    u = np.array(x, copy=True).view(D.unsigned_of(x.dtype))
    shift = 1
    # Smear the highest set bit rightwards; the zeros above it are what is left unset.
    while shift < 8 * x.dtype.itemsize:
        u |= u >> u.dtype.type(shift)
        shift *= 2
    width = 8 * x.dtype.itemsize
    return (width - np.bitwise_count(u).astype(np.int64)).astype(x.dtype)


_FLOAT32_TINY = np.float32(D.float_limits(D.FLOAT32)[1])


def flush_denormals(x):
    """``x`` (float32) with denormals replaced by zeros of their sign (a copy when any is)."""
    small = np.abs(x) < _FLOAT32_TINY
    if small.any():
        small &= x != 0
        x = np.array(x, copy=True)
        x[small] = np.copysign(np.float32(0), x[small])
    return x


def make_complex(real, imag):
    out = np.empty(np.broadcast_shapes(np.shape(real), np.shape(imag)),
                   D.complex_of(np.asarray(real).dtype))
    out.real = real
    out.imag = imag
    return out


def _cast_to(target: np.dtype) -> Callable:
    if target in D.NARROW_INTS:  # integers wrap: to the byte container, then to the width
        container = D.compute_dtype(target)
        return lambda x: np.asarray(x).astype(container).astype(target)
    return lambda x: np.asarray(x).astype(target)


# -- the spellings ---------------------------------------------------------------------------------

_NATIVE = D.NUMPY_NATIVE
_NUMBERS = _NATIVE - {D.BOOL}
_REAL_FLOATS = frozenset({D.FLOAT16, D.FLOAT32, D.FLOAT64})
_WHOLE_INTS = D.INTS - D.NARROW_INTS
_FLOATS_AND_COMPLEX = _REAL_FLOATS | D.COMPLEXES

def multiply_add_float32(a, b, c):
    """float32 ``a * b + c`` rounded once: the product is exact in float64, and the float64 sum
    rounded to float32 is the fused result (but where that sum lands exactly halfway between two
    float32 values without being exact, about once in 2**29)."""
    wide = np.multiply(a, b, dtype=np.float64)
    wide += c
    return wide.astype(np.float32)


# operation -> (the function, the dtypes of its first operand it takes)
_UFUNCS: dict[str, tuple[Callable, frozenset]] = {
    "add": (np.add, _NUMBERS), "subtract": (np.subtract, _NUMBERS),
    "multiply": (np.multiply, _NUMBERS), "divide": (np.divide, _REAL_FLOATS),
    "multiply_add": (multiply_add_float32, frozenset({D.FLOAT32})),
    "cdiv": (np.divide, D.COMPLEXES),
    "negate": (np.negative, _NUMBERS), "rem_trunc": (np.fmod, _WHOLE_INTS),
    "shl": (np.left_shift, _WHOLE_INTS), "lshr": (np.right_shift, D.UNSIGNED_INTS - D.NARROW_INTS),
    "ashr": (np.right_shift, D.SIGNED_INTS - D.NARROW_INTS),
    "fabs": (np.abs, _REAL_FLOATS), "floor": (np.floor, _REAL_FLOATS),
    "ceil": (np.ceil, _REAL_FLOATS), "trunc": (np.trunc, _REAL_FLOATS),
    "rint": (np.rint, _REAL_FLOATS), "round": (round_half_away, _REAL_FLOATS),
    "sqrt": (np.sqrt, _FLOATS_AND_COMPLEX), "cbrt": (np.cbrt, _REAL_FLOATS),
    "exp": (np.exp, _FLOATS_AND_COMPLEX), "expm1": (np.expm1, _REAL_FLOATS),
    "log": (np.log, _FLOATS_AND_COMPLEX), "log1p": (np.log1p, _REAL_FLOATS),
    "sin": (np.sin, _FLOATS_AND_COMPLEX), "cos": (np.cos, _FLOATS_AND_COMPLEX),
    "tan": (np.tan, _FLOATS_AND_COMPLEX), "tanh": (np.tanh, _FLOATS_AND_COMPLEX),
    "atan": (np.arctan, _REAL_FLOATS), "atan2": (np.arctan2, _REAL_FLOATS),
    "pow": (np.power, _FLOATS_AND_COMPLEX), "fmod": (np.fmod, _REAL_FLOATS),
    "hypot": (np.hypot, _REAL_FLOATS), "copysign": (np.copysign, _REAL_FLOATS),
    "popcount": (popcount, _WHOLE_INTS), "clz": (count_leading_zeros, _WHOLE_INTS),
    "div_trunc": (signed_div_trunc, D.SIGNED_INTS - D.NARROW_INTS),
    "flush_denormals": (flush_denormals, frozenset({D.FLOAT32})),
    "real": (lambda z: np.real(z).copy(), D.COMPLEXES),
    "imag": (lambda z: np.imag(z).copy(), D.COMPLEXES),
    "make_complex": (make_complex, frozenset({D.FLOAT32, D.FLOAT64})),
    # StableHLO ops whole (see the module docstring)
    "maximum": (float_maximum, _REAL_FLOATS), "minimum": (float_minimum, _REAL_FLOATS),
    "sign": (float_sign, _REAL_FLOATS), "is_finite": (np.isfinite, _REAL_FLOATS),
    "abs": (np.abs, D.SIGNED_INTS - D.NARROW_INTS),
    "shift_left": (shift_left, _WHOLE_INTS),
    "shift_right_logical": (shift_right_logical, _WHOLE_INTS),
    "shift_right_arithmetic": (shift_right_arithmetic, _WHOLE_INTS),
}
_BITWISE = {"and": (np.logical_and, np.bitwise_and), "or": (np.logical_or, np.bitwise_or),
            "xor": (np.logical_xor, np.bitwise_xor), "not": (np.logical_not, np.invert)}
_INT_EXTREMA = {"maximum": np.maximum, "minimum": np.minimum}
_COMPARISONS = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
                "GT": np.greater, "GE": np.greater_equal}
# compare runs on the types NumPy or ml_dtypes order natively; the float8 types are widened
_COMPARED = _NATIVE | {D.BFLOAT16}


def spelling(node: Expr) -> Callable | None:
    """The NumPy function computing ``node`` from its arguments' arrays, or None."""
    op, typed = node.op, node.args[0].dtype if node.args else node.dtype
    if op == "select":
        return np.where
    if op == "cast":
        return _cast_to(node.dtype)
    if op == "bitcast":
        return lambda x, dtype=node.dtype: np.asarray(x).view(dtype)
    if op == "compare":
        direction, compare_type = node.attr
        return _COMPARISONS.get(direction) if compare_type == "NOTYPE" and typed in _COMPARED \
            else None
    if op in _BITWISE and (typed == D.BOOL or typed in _WHOLE_INTS):
        return _BITWISE[op][0 if typed == D.BOOL else 1]
    if op in _INT_EXTREMA and typed in _WHOLE_INTS:
        return _INT_EXTREMA[op]
    if op == "div_trunc" and typed in D.UNSIGNED_INTS - D.NARROW_INTS:
        return np.floor_divide
    entry = _UFUNCS.get(op)
    if entry is not None and typed in entry[1]:
        return entry[0]
    if typed == D.FLOAT16 and op in ops.ELEMENTWISE:  # a float16 op that is one ufunc
        primitive = S.direct_primitive(op, typed)
        entry = _UFUNCS.get(primitive)
        if entry is not None and isinstance(entry[0], np.ufunc) and typed in entry[1]:
            return entry[0]
    return None


def _define(node: Expr) -> Expr | None:
    """The semantics' definition, exact ops on float16 kept in float16 (NumPy has its loops)."""
    return S.define(node, widen=node.args[0].dtype != D.FLOAT16 if node.args else True)


def _constant(node: Expr):
    return np.asarray(node.attr, node.dtype)[()] if node.dtype not in D.ML_FLOATS \
        else np.asarray(node.attr, D.FLOAT32).astype(node.dtype)[()]


def numpy_kernel(name: str, operand_dtypes, result_dtype, attributes=None) -> Callable:
    """A function of NumPy arrays computing StableHLO op ``name`` (short name) on operands of
    ``operand_dtypes``; ``scalar.Undefined`` when it cannot be written."""
    if elementwise_vm.ADDRESS is not None and float32_functions.is_float32_function(
            name, operand_dtypes, result_dtype):
        # the same expression compiled in C (one pass, not one NumPy pass per operation)
        return elementwise_vm.Float32FunctionKernel(name)
    root = float32_functions.renderer_root(name, operand_dtypes, result_dtype, attributes)
    order = schedule(root, lambda n: spelling(n) is not None, _define, RENDERER)
    return evaluator(order, len(operand_dtypes))


def evaluator(order: list[Expr], arity: int) -> Callable:
    """A function of ``arity`` arrays running the scheduled operations ``order``."""
    root = order[-1]
    if root.op == "arg":  # the op is its operand (a convert to the same type): a copy
        return lambda *args: np.array(args[root.attr], copy=True)
    if [a.op for a in root.args] == ["arg"] * len(root.args) and \
            [a.attr for a in root.args] == list(range(arity)) and len(order) == arity + 1:
        return spelling(root)  # one operation on the operands in order: NumPy's own function
    slots: dict[int, int] = {}
    steps = []
    constants = []
    for node in order:
        if node.op == "arg":
            slots[id(node)] = node.attr
        elif node.op == "const":
            slots[id(node)] = arity + len(constants)
            constants.append(_constant(node))
    base = arity + len(constants)
    for node in order:
        if node.op not in ("arg", "const"):
            slots[id(node)] = base + len(steps)
            steps.append((spelling(node), tuple(slots[id(a)] for a in node.args)))
    constants = tuple(constants)

    def run(*args):
        values = [*args, *constants]
        for function, inputs in steps:
            values.append(function(*[values[i] for i in inputs]))
        return values[-1]

    return run

