"""The op table: the Numba renderer of pjrtkit.semantics, one rule per StableHLO op, for every
driver.

A rule turns one application of an op into scalar statements: given the expressions of one
element of each operand (``Element.args``), it returns the lines assigning the result element
to the local ``Element.result``. What an op computes is not said here: the rule asks
``pjrtkit.semantics.definitions`` for the op's expression and rewrites it
(``semantics.scalar.schedule``) into the scalar operations this module spells, one local per
operation. Spellings follow Numba's typing:

- integer results are cast back to their declared dtype after every operation (Numba promotes
  small integers to 64 bits, so the cast is what makes arithmetic wrap in the declared width),
  and wrapping arithmetic runs on the unsigned type (Numba marks signed arithmetic
  no-signed-wrap); a bitcast between integers of one width is that cast;
- choices between computed values are ``select`` (an LLVM select from ``vecmath``), not
  branches, so loops vectorize;
- float32 exp/log/log1p/expm1/tanh/logistic call ``pjrtkit_cpu.vecmath``'s vectorizable
  versions (imported by ``module.HEADER`` as ``vm_<op>``); the other math functions call libm
  once per element (float64 transcendentals; float32 sine/cosine/tan/cbrt/atan2/pow/fmod):
  measured 5-60x slower than NumPy's SIMD loops, so fused loops (``vectorized=True``) decline
  them, while native loops, where the alternative is an interpreted loop, take them.

Every operand and result must be one of ``values.DTYPES``; an op or dtype the semantics do not
define, or whose expression needs an operation without a spelling here (a float bitcast, a
complex part), gives ``None``: the driver declines to the NumPy rule, it never emits code it
is not sure of. Constants are not in the table: fused groups read them as literal inputs
(``values.literal``) and native loops bind them as literals or constant arguments.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

from pjrtkit.semantics import definitions, ops
from pjrtkit.semantics.scalar import Expr, Undefined, schedule
from pjrtkit.stablehlo.ir import Op, TensorType

from pjrtkit_cpu.loopnest.values import (BOOL, DTYPES, FLOAT_DTYPES, INT_DTYPES, literal,
                                          scalar_type, unsigned)

PREFIX = ops.PREFIX
RENDERER = "pjrtkit_cpu's Numba emitter"


@dataclasses.dataclass(frozen=True)
class Element:
    """One application of an op in scalar code: operand element expressions ``args`` of
    dtypes ``dtypes``, a result of dtype ``out`` assigned to the local ``result``."""

    args: tuple[str, ...]
    dtypes: tuple[np.dtype, ...]
    out: np.dtype
    result: str
    attributes: dict
    vectorized: bool = True


@dataclasses.dataclass(frozen=True)
class OpRule:
    """The rule of one op: ``emit(element)`` gives its lines or None (see the module
    docstring); ``dtypes`` are the dtypes of its typed operand it may have code for."""

    op: str
    emit: Callable[[Element], list[str] | None]
    dtypes: frozenset


# -- spellings of the scalar operations ---------------------------------------------------------

_OPERATORS = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "and": "&",
              "or": "|", "xor": "^", "shl": "<<", "lshr": ">>", "ashr": ">>"}
_BOOL_OPERATORS = {"and": "&", "or": "|", "xor": "!="}  # no short circuit: no branch
_COMPARISONS = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
# vectorizable float32 versions in ``pjrtkit_cpu.vecmath`` (imported by ``module.HEADER`` as
# ``vm_<StableHLO name>``; a test checks it against vecmath.FLOAT32_FUNCTIONS)
FLOAT32_TRANSCENDENTALS = {
    "exponential": "exp_f32", "log": "log_f32", "log_plus_one": "log1p_f32",
    "exponential_minus_one": "expm1_f32", "tanh": "tanh_f32", "logistic": "logistic_f32",
}
_VECMATH = {"exp": "exponential", "log": "log", "log1p": "log_plus_one",
            "expm1": "exponential_minus_one", "tanh": "tanh"}
# LLVM intrinsics (vectorizable) and libm functions (one call per element)
_INTRINSICS = {"fabs": "abs", "floor": "np.floor", "ceil": "np.ceil", "trunc": "np.trunc",
               "rint": "np.rint", "sqrt": "np.sqrt"}
_LIBM = {"exp": "np.exp", "expm1": "np.expm1", "log": "np.log", "log1p": "np.log1p",
         "tanh": "np.tanh", "sin": "np.sin", "cos": "np.cos", "tan": "np.tan",
         "cbrt": "np.cbrt", "atan": "np.arctan", "atan2": "np.arctan2", "pow": "np.power",
         "fmod": "np.fmod"}
_F32 = np.dtype(np.float32)


def calls_libm(lines) -> bool:
    """Whether any of ``lines`` (statements this module spelled) calls libm once per element:
    LLVM does not vectorize a loop with such a call."""
    return any(f"{call}(" in line for line in lines for call in _LIBM.values())


def _spell(node: Expr, args: list[str], r: str, vectorized: bool) -> list[str] | None:
    """Lines assigning ``node`` (its operands' expressions ``args``) to local ``r``, or None
    when it has no spelling (on this dtype, or a libm call when ``vectorized``)."""
    op, t = node.op, scalar_type(node.dtype)
    typed = node.args[0].dtype if node.args else node.dtype
    if any(a.dtype not in DTYPES for a in node.args) or node.dtype not in DTYPES:
        return None
    if op in ("add", "subtract", "multiply") and typed != BOOL:
        x, y = args
        if typed in FLOAT_DTYPES:
            return [f"{r} = {t}({x} {_OPERATORS[op]} {y})"]
        u = scalar_type(unsigned(typed))
        return [f"{r} = {t}({u}({u}({x}) {_OPERATORS[op]} {u}({y})))"]
    if op == "divide" and typed in FLOAT_DTYPES:
        return [f"{r} = {t}({args[0]} / {args[1]})"]
    if op == "negate" and typed != BOOL:
        if typed in FLOAT_DTYPES:
            return [f"{r} = -{args[0]}"]
        u = scalar_type(unsigned(typed))
        return [f"{r} = {t}({u}({u}(0) - {u}({args[0]})))"]
    if op in ("and", "or", "xor"):
        x, y = args
        if typed == BOOL:
            return [f"{r} = {x} {_BOOL_OPERATORS[op]} {y}"]
        return [f"{r} = {t}({x} {_OPERATORS[op]} {y})"]
    if op == "not":
        return [f"{r} = not {args[0]}" if typed == BOOL else f"{r} = {t}(~{args[0]})"]
    if op in ("shl", "lshr", "ashr") and typed in INT_DTYPES:  # the amount is < the width
        x, y = args
        if op == "shl":
            u = scalar_type(unsigned(typed))
            return [f"{r} = {t}({u}({u}({x}) << {u}({y})))"]
        return [f"{r} = {t}({x} >> {y})"]  # logical on unsigned, arithmetic on signed types
    if op == "div_trunc" and typed in INT_DTYPES:  # y != 0, no overflow
        x, y = args
        if typed.kind == "u":
            return [f"{r} = {t}({x} // {y})"]
        return [f"{r} = {t}({x} // {y} + (1 if ({x} % {y} != 0 and "
                f"(({x} < 0) != ({y} < 0))) else 0))"]
    if op == "rem_trunc" and typed in INT_DTYPES:
        x, y = args
        if typed.kind == "u":
            return [f"{r} = {t}({x} % {y})"]
        return [f"{r}__m = {x} % {y}",  # Python's floor remainder, then the dividend's sign
                f"{r} = {t}({r}__m - {y}) if ({r}__m != 0 and (({r}__m < 0) != ({x} < 0))) "
                f"else {t}({r}__m)"]
    if op == "compare" and node.attr[1] == "NOTYPE":
        return [f"{r} = {args[0]} {_COMPARISONS[node.attr[0]]} {args[1]}"]
    if op == "select":
        return [f"{r} = select({args[0]}, {t}({args[1]}), {t}({args[2]}))"]
    if op == "bitcast" and (typed in FLOAT_DTYPES or node.dtype in FLOAT_DTYPES):
        return [f"{r} = {scalar_type(typed)}({args[0]}).view({t})"]
    if op == "cast" or (op == "bitcast" and typed in INT_DTYPES and node.dtype in INT_DTYPES):
        if typed == BOOL:
            return [f"{r} = {t}(1) if {args[0]} else {t}(0)"]
        return [f"{r} = {t}({args[0]})"]  # integers wrap; to a float rounds once
    if typed not in FLOAT_DTYPES:
        return None
    if op == "copysign":
        return [f"{r} = {t}(math.copysign({args[0]}, {args[1]}))"]
    if op in _INTRINSICS:
        return [f"{r} = {t}({_INTRINSICS[op]}({args[0]}))"]
    if typed == _F32 and op in _VECMATH:
        return [f"{r} = vm_{_VECMATH[op]}({args[0]})"]
    if typed == _F32 and op == "logistic":
        return [f"{r} = vm_logistic({args[0]})"]
    if op in _LIBM and not vectorized:
        return [f"{r} = {t}({_LIBM[op]}({', '.join(args)}))"]
    return None


# -- rendering an op ----------------------------------------------------------------------------

def _attribute_key(name: str, attributes: dict) -> tuple:
    return definitions.attribute_key(name, attributes)


@functools.lru_cache(maxsize=4096)
def _schedule(name: str, dtypes: tuple, out: np.dtype, key: tuple,
              vectorized: bool) -> tuple[tuple[Expr, ...] | None, str]:
    """(the operations computing op ``name`` as this module spells them, "") or (None, why
    not)."""
    attributes = dict(zip(ops.ELEMENTWISE[name].attributes, key))
    try:
        root = definitions.elementwise(name, dtypes, out, attributes)
        return tuple(schedule(root, lambda n: _spell(n, ["a"] * len(n.args), "r",
                                                     vectorized) is not None,
                              definitions.define, RENDERER)), ""
    except Undefined as exc:
        return None, f"{PREFIX}{name} on {exc.dtype.name}: {exc}"


def _render(e: Element, name: str) -> list[str] | None:
    if any(d not in DTYPES for d in (*e.dtypes, e.out)):
        return None
    order, _ = _schedule(name, tuple(e.dtypes), e.out, _attribute_key(name, e.attributes),
                         e.vectorized)
    if order is None:
        return None
    local: dict[int, str] = {}
    lines: list[str] = []
    last = len(order) - 1
    for k, node in enumerate(order):
        if node.op == "arg":
            local[id(node)] = e.args[node.attr]
            continue
        if node.op == "const":
            local[id(node)] = literal(node.attr, node.dtype)
            continue
        target = e.result if k == last else f"{e.result}__e{k}"
        lines += _spell(node, [local[id(a)] for a in node.args], target, e.vectorized)
        local[id(node)] = target
    if order[-1].op in ("arg", "const"):  # the op is its operand (convert to the same type)
        lines.append(f"{e.result} = {local[id(order[-1])]}")
    return lines


def _rule(traits: ops.OpTraits) -> OpRule:
    def emit(e: Element) -> list[str] | None:
        return _render(e, traits.name)

    emit.__name__ = f"emit_{traits.name}"
    kinds = {BOOL: "bool", **{d: "float" for d in FLOAT_DTYPES},
             **{d: "signed" if d.kind == "i" else "unsigned" for d in INT_DTYPES}}
    return OpRule(traits.op, emit, frozenset(d for d in DTYPES if kinds[d] in traits.kinds))


OP_TABLE: dict[str, OpRule] = {t.op: _rule(t) for t in ops.ELEMENTWISE.values()}


# -- the entry point -------------------------------------------------------------------------

def _element(op: Op, args: list[str], result: str, vectorized: bool) -> Element | None:
    if len(op.results) != 1 or op.regions:
        return None
    types = [v.type for v in (*op.operands, *op.results)]
    if not all(isinstance(t, TensorType) and t.dtype in DTYPES for t in types):
        return None
    return Element(tuple(args), tuple(v.type.dtype for v in op.operands),
                   op.results[0].type.dtype, result, op.attributes, vectorized)


def emit(op: Op, args: list[str], result: str, vectorized: bool = True) -> list[str] | None:
    """Statements assigning one element of ``op``'s result to the local ``result`` from the
    operand element expressions ``args``; None when the table cannot emit ``op`` (the driver
    then leaves it to the NumPy rules). ``vectorized``: decline per-element libm calls."""
    rule = OP_TABLE.get(op.name)
    element = None if rule is None else _element(op, args, result, vectorized)
    return None if element is None else rule.emit(element)


def explain(op: Op, vectorized: bool = False) -> str | None:
    """Why ``emit`` declines ``op`` (naming op and dtype), or None when it emits it."""
    if op.name not in OP_TABLE:
        return f"{op.name} is not an elementwise op of pjrtkit.semantics"
    for v in (*op.operands, *op.results):
        dtype = getattr(v.type, "dtype", None)
        if dtype not in DTYPES:
            return (f"{op.name} on {getattr(dtype, 'name', v.type)}: {RENDERER} computes "
                    f"only in {', '.join(sorted(d.name for d in DTYPES))}")
    if _element(op, ["a"] * len(op.operands), "r", vectorized) is None:
        return f"{op.name}: not one result without regions"
    traits = ops.traits(op.name)
    _, why = _schedule(traits.name, tuple(v.type.dtype for v in op.operands),
                       op.results[0].type.dtype, _attribute_key(traits.name, op.attributes),
                       vectorized)
    return why or None


def supports(op: Op, vectorized: bool = True) -> bool:
    """Whether ``emit`` has code for ``op``."""
    return emit(op, [f"a{i}" for i in range(len(op.operands))], "r", vectorized) is not None
