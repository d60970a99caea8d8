"""The Triton renderer of pjrtkit.semantics: each elementwise StableHLO op as Triton statements.

``statements(op, operands, result)`` asks ``pjrtkit.semantics.definitions`` for the op's
expression, rewrites it (``semantics.scalar.schedule``) into the scalar operations this module
spells, and returns one assignment per operation, the last to ``result``. Nothing here says
what an op means; operations Triton has no function for (trunc, rint, tan, atan2, pow, cbrt,
expm1, popcount, ...) come from the semantics' recipes in terms of those it has, so the same
source runs under Triton's interpreter, which calls no device library.

Values are held in their compute types (``dtypes.compute_language_type``): bool as int1,
float16/bfloat16 as float32 values already rounded to their type. So a conversion to a
float16/bfloat16 rounds through the type and back (``.to(tl.float16).to(tl.float32)``), and a
bitcast of one goes through its storage type. Every operation's result is converted to its
compute type (``.to(tl.T)``), so Triton's promotions (an int8 times a Python int is int32)
never leak. An op or dtype that cannot be written raises ``NoKernel`` with the reason, which
the rules turn into UNIMPLEMENTED naming op and dtype.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from pjrtkit.semantics import definitions, ops
from pjrtkit.semantics.scalar import Expr, Undefined, schedule

from pjrtkit_gpu import dtypes as D

RENDERER = "the GPU plugins' Triton kernels"
# Every elementwise op of the semantics (whether a dtype renders is decided per op).
OPS = frozenset(t.op for t in ops.ELEMENTWISE.values())


class NoKernel(Exception):
    """This op/dtype has no expression; the message says why."""


def _tl(dtype) -> str:
    return f"tl.{D.compute_language_type(dtype)}"


_OPERATORS = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "and": "&",
              "or": "|", "xor": "^", "shl": "<<", "lshr": ">>", "ashr": ">>",
              "div_trunc": "//", "rem_trunc": "%", "fmod": "%"}
_COMPARISONS = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
_FUNCTIONS = {"fabs": "tl.abs", "floor": "tl.floor", "ceil": "tl.ceil", "sqrt": "tl.sqrt",
              "exp": "tl.exp", "log": "tl.log", "sin": "tl.sin", "cos": "tl.cos"}
_INT_ONLY = {"div_trunc", "rem_trunc", "shl", "lshr", "ashr"}


def _literal(value, dtype) -> str:
    if dtype == D.BOOL:
        return "True" if value else "False"
    if D.is_float(dtype):
        if math.isnan(value):
            text = "float('nan')"
        elif math.isinf(value):
            text = "float('inf')" if value > 0 else "float('-inf')"
        else:
            text = repr(float(value))
        return f"tl.full((), {text}, {_tl(dtype)})"
    return f"tl.full((), {int(value)}, {_tl(dtype)})"


# bfloat16 converts on its bits (exactly as a GPU's cvt instructions do): Triton's interpreter
# flushes bfloat16 denormals and does not round float32's largest values to inf.

def _bfloat16_bits(value: str) -> str:
    """The float32 ``value`` rounded to bfloat16 (to nearest even, overflow to inf, NaN
    kept), as float32 bits whose low half is zero."""
    bits = f"({value}).to(tl.uint32, bitcast=True)"
    rounded = f"({bits} + 0x7FFF + (({bits} >> 16) & 1))"
    return f"(tl.where({value} != {value}, {bits} | 0x400000, {rounded}) & 0xFFFF0000)"


def _bfloat16_rounded(value: str) -> str:
    """The float32 ``value`` rounded to bfloat16, held as float32."""
    return f"{_bfloat16_bits(value)}.to(tl.float32, bitcast=True)"


def bfloat16_load(value: str) -> str:
    """A loaded bfloat16 ``value`` as float32, exactly."""
    return f"(({value}).to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, " \
           f"bitcast=True)"


def bfloat16_store(value: str) -> str:
    """A float32 ``value`` rounded to bfloat16 for a store."""
    return f"({_bfloat16_bits(value)} >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)"


def _spell(node: Expr, args: list[str]) -> str | None:
    """The Triton expression of ``node`` (in its compute type) from its operands'
    expressions, or None when Triton has no spelling of it on this dtype."""
    op, dtype = node.op, node.dtype
    typed = node.args[0].dtype if node.args else dtype
    if any(not D.is_supported(a.dtype) for a in node.args) or not D.is_supported(dtype):
        return None
    if op == "cast":
        if dtype == typed:
            return args[0]
        if typed == D.BOOL:  # 0 or 1 (an int1 converts as a signed one-bit integer)
            args = [f"tl.where({args[0]}, 1, 0)"]
        if dtype in D.NARROW_FLOATS:  # round to the type, keep it as float32 (from an
            # integer through float32, exact for every integer below float16's range)
            value = args[0] if D.is_float(typed) else f"{args[0]}.to(tl.float32)"
            if dtype == D.BFLOAT16 and typed != D.FLOAT64:
                return _bfloat16_rounded(value)
            return f"{value}.to(tl.{D.storage_language_type(dtype)}).to(tl.float32)"
        return f"{args[0]}.to({_tl(dtype)})"
    if op == "bitcast":
        source = args[0]
        if typed in D.NARROW_FLOATS:
            source = f"{source}.to(tl.{D.storage_language_type(typed)})"
        storage = f"tl.{D.storage_language_type(dtype)}" if dtype in D.NARROW_FLOATS \
            else _tl(dtype)
        value = f"{source}.to({storage}, bitcast=True)"
        return f"{value}.to(tl.float32)" if dtype in D.NARROW_FLOATS else value
    if op == "select":
        return f"tl.where({args[0]}, {args[1]}, {args[2]})"
    if typed in D.NARROW_FLOATS:  # computed in float32 as the semantics say (rounding,
        return None               # flushing), never on the narrow value directly
    if op == "compare":
        direction, compare_type = node.attr
        return f"({args[0]} {_COMPARISONS[direction]} {args[1]})" \
            if compare_type == "NOTYPE" else None
    if op == "not":
        return f"({args[0]} == 0)" if typed == D.BOOL else f"(~{args[0]})"
    if op in ("and", "or", "xor") and not D.is_float(typed):
        return f"({args[0]} {_OPERATORS[op]} {args[1]})"
    if typed == D.BOOL:
        return None
    if op in _INT_ONLY:
        return f"({args[0]} {_OPERATORS[op]} {args[1]})" if not D.is_float(typed) else None
    if op in ("add", "subtract", "multiply"):
        return f"({args[0]} {_OPERATORS[op]} {args[1]})"
    if op == "negate":
        return f"(0 - {args[0]})"
    if not D.is_float(typed):
        return None
    if op in ("divide", "fmod"):
        return f"({args[0]} {_OPERATORS[op]} {args[1]})"
    if op == "sqrt" and typed == D.FLOAT32:  # tl.sqrt of float32 may be approximate
        return f"tl.sqrt_rn({args[0]})"
    if op in _FUNCTIONS:
        return f"{_FUNCTIONS[op]}({args[0]})"
    return None


def _spells(node: Expr) -> bool:
    return _spell(node, ["a"] * len(node.args)) is not None


@functools.lru_cache(maxsize=4096)
def _schedule(name: str, dtypes: tuple, out: np.dtype, key: tuple) -> tuple[Expr, ...]:
    attributes = dict(zip(ops.ELEMENTWISE[name].attributes, key))
    try:
        root = definitions.elementwise(name, dtypes, out, attributes)
        return tuple(schedule(root, _spells, definitions.define, RENDERER))
    except Undefined as exc:
        raise NoKernel(f"{ops.PREFIX}{name} on {exc.dtype.name}: {exc}") from None


def statements(op, operands: list[str], result: str) -> list[str]:
    """Assignments computing ``op``'s result into the variable ``result`` (temporaries
    ``{result}__t<k>``) from its operands' expressions, all in compute types."""
    traits = ops.traits(op.name)
    if traits is None or not op.name.startswith(ops.PREFIX):
        raise NoKernel(f"{op.name} has no GPU kernel")
    for value in (*op.operands, *op.results):
        if not D.is_supported(value.type.dtype):
            raise NoKernel(f"{op.name} on {value.type.dtype.name} (the GPU kernels take "
                           f"{', '.join(d.name for d in D.SUPPORTED)})")
    key = definitions.attribute_key(traits.name, op.attributes)
    order = _schedule(traits.name, tuple(v.type.dtype for v in op.operands),
                      op.results[0].type.dtype, key)
    local: dict[int, str] = {}
    lines = []
    last = len(order) - 1
    for k, node in enumerate(order):
        if node.op == "arg":
            local[id(node)] = operands[node.attr]
        elif node.op == "const":
            local[id(node)] = _literal(node.attr, node.dtype)
        else:
            name = result if k == last else f"{result}__t{k}"
            text = _spell(node, [local[id(a)] for a in node.args])
            lines.append(f"{name} = ({text}).to({_tl(node.dtype)})")
            local[id(node)] = name
    if order[-1].op in ("arg", "const"):
        lines.append(f"{result} = {local[id(order[-1])]}")
    return lines


def renders(op) -> bool:
    """Whether ``statements`` has code for ``op``."""
    try:
        statements(op, [f"a{i}" for i in range(len(op.operands))], "r")
    except NoKernel:
        return False
    return True
