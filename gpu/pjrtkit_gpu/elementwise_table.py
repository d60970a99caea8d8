"""One expression per elementwise StableHLO op: from its operands' expressions (in their compute
types, ``dtypes.compute_language_type``) the Triton expression of its result, with XLA's
semantics (integer division by zero, shifts past the width, saturating float->int conversion,
NaN-propagating max/min). An op or dtype without an entry raises ``NoKernel`` with the reason,
which the rule turns into UNIMPLEMENTED naming op and dtype.

Every result is converted to its compute type (``.to(tl.T)``), so Triton's promotions (an int8
times a Python int is int32) never leak; float16/bfloat16 results are rounded to their type
after every op, as XLA's CPU backend does.
"""
from __future__ import annotations

import numpy as np

from pjrtkit_gpu import dtypes as D


class NoKernel(Exception):
    """This op/dtype has no expression; the message says why."""


def _tl(dtype) -> str:
    return f"tl.{D.compute_language_type(dtype)}"


def finish(expr: str, dtype) -> str:
    """``expr`` converted to ``dtype``'s compute type, rounded through a narrow float."""
    if dtype in D.NARROW_FLOATS:
        return f"(({expr}).to(tl.{D.storage_language_type(dtype)}).to(tl.float32))"
    return f"(({expr}).to({_tl(dtype)}))"


def _nan_max(a: str, b: str) -> str:
    return f"tl.where({a} != {a}, {a}, tl.where({b} != {b}, {b}, tl.maximum({a}, {b})))"


def _nan_min(a: str, b: str) -> str:
    return f"tl.where({a} != {a}, {a}, tl.where({b} != {b}, {b}, tl.minimum({a}, {b})))"


def _int_limits(dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _operand(op, i=0):
    return op.operands[i].type.dtype


def _need(condition: bool, why: str) -> None:
    if not condition:
        raise NoKernel(why)


def _add(op, a, b):
    d = _operand(op)
    return f"({a} | {b})" if d == D.BOOL else f"({a} + {b})"


def _subtract(op, a, b):
    _need(_operand(op) != D.BOOL, "subtract of bool")
    return f"({a} - {b})"


def _multiply(op, a, b):
    return f"({a} & {b})" if _operand(op) == D.BOOL else f"({a} * {b})"


def _divide(op, a, b):
    d = _operand(op)
    _need(d != D.BOOL, "divide of bool")
    if D.is_float(d):
        return f"({a} / {b})"
    if D.is_unsigned(d):
        _, hi = _int_limits(d)
        return f"tl.where({b} == 0, {hi}, {a} // tl.where({b} == 0, 1, {b}))"
    lo, _ = _int_limits(d)
    overflow = f"(({a} == {lo}) & ({b} == -1))"
    safe = f"tl.where(({b} == 0) | {overflow}, 1, {b})"
    return f"tl.where({b} == 0, -1, tl.where({overflow}, {lo}, {a} // {safe}))"


def _remainder(op, a, b):
    d = _operand(op)
    _need(d != D.BOOL, "remainder of bool")
    if D.is_float(d):
        return f"({a} % {b})"
    if D.is_unsigned(d):
        return f"tl.where({b} == 0, {a}, {a} % tl.where({b} == 0, 1, {b}))"
    lo, _ = _int_limits(d)
    overflow = f"(({a} == {lo}) & ({b} == -1))"
    safe = f"tl.where(({b} == 0) | {overflow}, 1, {b})"
    return f"tl.where({b} == 0, {a}, tl.where({overflow}, 0, {a} % {safe}))"


def _maximum(op, a, b):
    d = _operand(op)
    if d == D.BOOL:
        return f"({a} | {b})"
    return _nan_max(a, b) if D.is_float(d) else f"tl.maximum({a}, {b})"


def _minimum(op, a, b):
    d = _operand(op)
    if d == D.BOOL:
        return f"({a} & {b})"
    return _nan_min(a, b) if D.is_float(d) else f"tl.minimum({a}, {b})"


def _bitwise(symbol):
    def expr(op, a, b):
        _need(not D.is_float(_operand(op)), f"bitwise op on {_operand(op).name}")
        return f"({a} {symbol} {b})"
    return expr


def _not(op, a):
    d = _operand(op)
    _need(not D.is_float(d), f"not of {d.name}")
    return f"({a} == 0)" if d == D.BOOL else f"(~{a})"


def _negate(op, a):
    d = _operand(op)
    _need(d != D.BOOL, "negate of bool")
    return f"(0 - {a})"


def _abs(op, a):
    d = _operand(op)
    _need(d != D.BOOL, "abs of bool")
    return a if D.is_unsigned(d) else f"tl.abs({a})"


def _sign(op, a):
    d = _operand(op)
    _need(d != D.BOOL, "sign of bool")
    if D.is_float(d):
        return f"tl.where({a} > 0, 1.0, tl.where({a} < 0, -1.0, {a}))"
    return f"tl.where({a} > 0, 1, tl.where({a} < 0, -1, 0))"


def _float_only(function):
    def expr(op, a):
        d = _operand(op)
        _need(D.is_float(d), f"{op.name} of {d.name} (floating point only)")
        return function(a)
    return expr


def _expm1(a):
    # Kahan: exp(a) - 1 rescaled by a / log(exp(a)), exact where exp(a) rounds to 1.
    u = f"tl.exp({a})"
    return (f"tl.where({u} == 1.0, {a}, tl.where({u} - 1.0 == -1.0, -1.0, "
            f"({u} - 1.0) * {a} / tl.log({u})))")


def _log1p(a):
    u = f"(1.0 + {a})"
    return f"tl.where({u} == 1.0, {a}, tl.log({u}) * {a} / ({u} - 1.0))"


def _tanh(a):
    # sign(a) * -expm1(-2|a|) / (2 + expm1(-2|a|)): accurate near 0 and saturating at 1.
    m = _expm1(f"(-2.0 * tl.abs({a}))")
    return f"tl.where({a} != {a}, {a}, tl.where({a} < 0, -1.0, 1.0) * (-({m}) / (2.0 + {m})))"


def _power(op, a, b):
    d = _operand(op)
    _need(D.is_float(d) and d != D.FLOAT64,
          f"power of {d.name} (float16, bfloat16 and float32 only, computed in float64)")
    x, y = f"{a}.to(tl.float64)", f"{b}.to(tl.float64)"
    magnitude = f"tl.exp({y} * tl.log(tl.abs({x})))"
    odd = f"((tl.floor({y}) == {y}) & (tl.floor({y} * 0.5) != {y} * 0.5))"
    integral = f"(tl.floor({y}) == {y})"
    value = (f"tl.where({x} < 0, tl.where({integral}, tl.where({odd}, -{magnitude}, "
             f"{magnitude}), float('nan')), {magnitude})")
    return f"tl.where({y} == 0.0, 1.0, {value})"


def _total_order_key(x: str, dtype) -> str:
    """A signed integer that orders floats as IEEE 754 totalOrder does (-NaN < -inf < ... <
    -0.0 < +0.0 < ... < inf < NaN): the bits, with the magnitude bits flipped when negative.
    float16/bfloat16 are exact in their float32 compute type, whose order is theirs."""
    bits = 64 if dtype == D.FLOAT64 else 32
    raw = f"{x}.to(tl.int{bits}, bitcast=True)"
    return f"({raw} ^ (({raw} >> {bits - 1}) & {2 ** (bits - 1) - 1}))"


def _compare(op, a, b):
    d = _operand(op)
    direction = op.attributes["comparison_direction"]
    if op.attributes.get("compare_type", "NOTYPE") == "TOTALORDER" and D.is_float(d):
        a, b = _total_order_key(a, d), _total_order_key(b, d)
    symbol = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}.get(direction)
    _need(symbol is not None, f"comparison_direction {direction}")
    return f"({a} {symbol} {b})"


def _select(op, p, a, b):
    return f"tl.where({p}, {a}, {b})"


def _clamp(op, lo, x, hi):
    d = op.operands[1].type.dtype
    _need(d != D.BOOL, "clamp of bool")
    if D.is_float(d):
        return _nan_min(_nan_max(x, lo), hi)
    return f"tl.minimum(tl.maximum({x}, {lo}), {hi})"


def _convert(op, a):
    source, target = _operand(op), op.results[0].type.dtype
    if target == D.BOOL:
        return f"({a} != 0)"
    if D.is_float(source) and not D.is_float(target):
        bits = target.itemsize * 8
        lo, hi = _int_limits(target)
        if D.is_unsigned(target):
            low, high = "0.0", f"{float(2 ** bits)}"
        else:
            low, high = f"{float(-2 ** (bits - 1))}", f"{float(2 ** (bits - 1))}"
        # Saturating, NaN -> 0, as XLA; out-of-range lanes are zeroed before .to so that the
        # conversion itself is always defined.
        bad = f"(({a} != {a}) | ({a} <= {low}) | ({a} >= {high}))"
        converted = f"tl.where({bad}, 0.0, {a}).to({_tl(target)})"
        return (f"tl.where({a} != {a}, 0, tl.where({a} <= {low}, {lo}, "
                f"tl.where({a} >= {high}, {hi}, {converted})))")
    return f"{a}.to({_tl(target)})"


def _shift(kind):
    def expr(op, a, b):
        d = _operand(op)
        _need(not D.is_float(d) and d != D.BOOL, f"{op.name} of {d.name}")
        bits = d.itemsize * 8
        out_of_range = f"(({b} < 0) | ({b} >= {bits}))" if D.is_signed(d) else f"({b} >= {bits})"
        amount = f"tl.where({out_of_range}, 0, {b})"
        if kind == "left":
            return f"tl.where({out_of_range}, 0, {a} << {amount})"
        if kind == "arithmetic":
            fill = f"tl.where({a} < 0, -1, 0)" if D.is_signed(d) else "0"
            return f"tl.where({out_of_range}, {fill}, {a} >> {amount})"
        if D.is_signed(d):
            u = f"tl.uint{bits}"
            logical = (f"({a}.to({u}, bitcast=True) >> {amount}.to({u}, bitcast=True))"
                       f".to(tl.int{bits}, bitcast=True)")
        else:
            logical = f"({a} >> {amount})"
        return f"tl.where({out_of_range}, 0, {logical})"
    return expr


def _is_finite(op, a):
    d = _operand(op)
    _need(D.is_float(d), f"is_finite of {d.name}")
    return f"(({a} == {a}) & (tl.abs({a}) != float('inf')))"


TABLE = {
    "stablehlo.add": _add,
    "stablehlo.subtract": _subtract,
    "stablehlo.multiply": _multiply,
    "stablehlo.divide": _divide,
    "stablehlo.remainder": _remainder,
    "stablehlo.maximum": _maximum,
    "stablehlo.minimum": _minimum,
    "stablehlo.and": _bitwise("&"),
    "stablehlo.or": _bitwise("|"),
    "stablehlo.xor": _bitwise("^"),
    "stablehlo.not": _not,
    "stablehlo.negate": _negate,
    "stablehlo.abs": _abs,
    "stablehlo.sign": _sign,
    "stablehlo.exponential": _float_only(lambda a: f"tl.exp({a})"),
    "stablehlo.log": _float_only(lambda a: f"tl.log({a})"),
    "stablehlo.sqrt": _float_only(lambda a: f"tl.sqrt({a})"),
    "stablehlo.rsqrt": _float_only(lambda a: f"(1.0 / tl.sqrt({a}))"),
    "stablehlo.sine": _float_only(lambda a: f"tl.sin({a})"),
    "stablehlo.cosine": _float_only(lambda a: f"tl.cos({a})"),
    "stablehlo.floor": _float_only(lambda a: f"tl.floor({a})"),
    "stablehlo.ceil": _float_only(lambda a: f"tl.ceil({a})"),
    "stablehlo.exponential_minus_one": _float_only(_expm1),
    "stablehlo.log_plus_one": _float_only(_log1p),
    "stablehlo.tanh": _float_only(_tanh),
    "stablehlo.logistic": _float_only(lambda a: f"(1.0 / (1.0 + tl.exp(0.0 - {a})))"),
    "stablehlo.is_finite": _is_finite,
    "stablehlo.power": _power,
    "stablehlo.compare": _compare,
    "stablehlo.select": _select,
    "stablehlo.clamp": _clamp,
    "stablehlo.convert": _convert,
    "stablehlo.shift_left": _shift("left"),
    "stablehlo.shift_right_arithmetic": _shift("arithmetic"),
    "stablehlo.shift_right_logical": _shift("logical"),
}


def expression(op, operands: list[str]) -> str:
    """The result of ``op`` in its compute type, from its operands' expressions."""
    try:
        make = TABLE[op.name]
    except KeyError:
        raise NoKernel(f"{op.name} has no GPU kernel") from None
    for value in (*op.operands, *op.results):
        if not D.is_supported(value.type.dtype):
            raise NoKernel(f"{op.name} on {value.type.dtype.name} (the GPU kernels take "
                           f"{', '.join(d.name for d in D.SUPPORTED)})")
    return finish(make(op, *operands), op.results[0].type.dtype)
