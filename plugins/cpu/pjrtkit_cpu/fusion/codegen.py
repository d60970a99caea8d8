"""Numba source for one fused elementwise group: one loop, every op as scalar code.

Each op is emitted as statements assigning one local per result, with the semantics XLA's CPU
backend defines and ``lowering/elementwise_tables.py`` implements for whole arrays: integer
results are cast back to their declared dtype after every op (Numba promotes small integers to
64 bits, so the cast is what makes arithmetic wrap in the declared width), shift amounts are read
as unsigned and amounts >= the width give 0 (or the sign fill), float->int conversion saturates
with NaN -> 0, maximum/minimum propagate NaN and order -0.0 below +0.0. float16/bfloat16 are not
fused at all (XLA rounds through f32 once per op; the unfused kernels already do that). float32
transcendentals call ``pjrtkit_cpu.vecmath`` (float64 ones stay unfused). Choices between
computed values are ``vecmath.select`` (an LLVM select), not branches, so loops vectorize.

``supports(op)`` says whether an op can be emitted; ``generate(...)`` returns the module source.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
from pathlib import Path

import numpy as np

from pjrtkit.stablehlo.ir import Op, TensorType

PREFIX = "stablehlo."
BROADCAST = "stablehlo.broadcast_in_dim"
TRANSPOSE = "stablehlo.transpose"
# Ops a group absorbs: no code, their operand is read with other strides (see InputKind).
ABSORBED = frozenset({BROADCAST, TRANSPOSE})

FLOAT_DTYPES = frozenset(np.dtype(d) for d in (np.float32, np.float64))
INT_DTYPES = frozenset(np.dtype(d) for d in (np.int8, np.int16, np.int32, np.int64,
                                             np.uint8, np.uint16, np.uint32, np.uint64))
BOOL = np.dtype(np.bool_)
DTYPES = FLOAT_DTYPES | INT_DTYPES | {BOOL}


def _nb(dtype: np.dtype) -> str:
    """The NumPy scalar constructor that casts (and, for integers, wraps) to ``dtype``."""
    return "bool" if dtype == BOOL else f"np.{dtype.name}"


def _unsigned(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"u{dtype.itemsize}")


def _signed(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"i{dtype.itemsize}")


# -- per-op emitters: (result name, operand names, operand dtype, op) -> lines -------------------
# Float ops whose NumPy scalar function matches the array kernel in elementwise_tables. Only
# ops that are one or a few instructions: Numba calls libm per element for transcendentals
# (exp, log, tanh, sin, ...), measured 5-60x slower than NumPy's SIMD loops. float32
# transcendentals with a vectorizable version in ``pjrtkit_cpu.vecmath`` call that (the
# generated module imports it as ``vm_<name>``); the others stay unfused and split groups.
# (Names, not the functions: importing vecmath imports Numba, which only the background compile
# thread's preparation may do. A test checks this table against vecmath.FLOAT32_FUNCTIONS.)
FLOAT32_TRANSCENDENTALS = {
    "exponential": "exp_f32", "log": "log_f32", "log_plus_one": "log1p_f32",
    "exponential_minus_one": "expm1_f32", "tanh": "tanh_f32", "logistic": "logistic_f32",
}
_FLOAT_UNARY_CALLS = {
    "floor": "np.floor", "ceil": "np.ceil", "round_nearest_even": "np.rint",
    "sqrt": "np.sqrt",
}
_FLOAT_BINARY_OPERATORS = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}
_INT_BINARY_OPERATORS = {"add": "+", "subtract": "-", "multiply": "*",
                         "and": "&", "or": "|", "xor": "^"}
_BOOL_BINARY = {"add": "or", "multiply": "and", "maximum": "or", "minimum": "and",
                "and": "and", "or": "or", "xor": "!="}
_COMPARISONS = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def _float_op(name: str, r: str, a: list[str], t: str) -> list[str] | None:
    if name in FLOAT32_TRANSCENDENTALS:
        return [f"{r} = vm_{name}({a[0]})"] if t == "np.float32" else None
    if name in _FLOAT_UNARY_CALLS:
        return [f"{r} = {t}({_FLOAT_UNARY_CALLS[name]}({a[0]}))"]
    if name in _FLOAT_BINARY_OPERATORS:
        return [f"{r} = {t}({a[0]} {_FLOAT_BINARY_OPERATORS[name]} {a[1]})"]
    x = a[0]
    if name == "abs":
        return [f"{r} = {t}(abs({x}))"]
    if name == "negate":
        return [f"{r} = -{x}"]
    if name == "sign":  # keeps -0.0 and NaN, like XLA
        return [f"{r} = {x} if ({x} == 0 or {x} != {x}) else ({t}(1) if {x} > 0 else {t}(-1))"]
    if name == "round_nearest_afz":
        return [f"{r} = np.trunc({x})",
                f"if abs({x} - {r}) >= 0.5:",
                f"    {r} = {t}({r} + math.copysign(1.0, {x}))"]
    if name == "rsqrt":
        return [f"{r} = {t}({t}(1) / {t}(np.sqrt({x})))"]
    if name in ("maximum", "minimum"):
        y = a[1]
        bigger, smaller = (x, y) if name == "maximum" else (y, x)
        # Equal values: only zeros can differ (in sign); maximum prefers +0, minimum -0, and
        # for zeros x + y is +0 unless both are -0 (so -(-x - y) is -0 unless both are +0).
        tie = f"{x} + {y}" if name == "maximum" else f"-(-{x} - {y})"
        # Selects, not branches: see vecmath.select.
        return [f"{r}_t = select({x} == 0, {tie}, {x})",
                f"{r} = select({x} != {x}, {x}, select({y} != {y}, {y}, select({x} > {y}, "
                f"{bigger}, select({y} > {x}, {smaller}, {r}_t))))"]
    return None


def _int_op(name: str, r: str, a: list[str], dtype: np.dtype) -> list[str] | None:
    t = _nb(dtype)
    u = _nb(_unsigned(dtype))
    s = _nb(_signed(dtype))
    width = 8 * dtype.itemsize
    signed = dtype.kind == "i"
    x = a[0]
    # Numba marks signed arithmetic no-signed-wrap (LLVM may then assume it never overflows),
    # so wrapping arithmetic runs on the unsigned type of the same width and is cast back.
    if name in ("add", "subtract", "multiply"):
        return [f"{r} = {t}({u}({u}({x}) {_INT_BINARY_OPERATORS[name]} {u}({a[1]})))"]
    if name in _INT_BINARY_OPERATORS:
        return [f"{r} = {t}({x} {_INT_BINARY_OPERATORS[name]} {a[1]})"]
    negated = f"{t}({u}({u}(0) - {u}({x})))"
    if name == "negate":
        return [f"{r} = {negated}"]
    if name == "abs":  # INT_MIN stays INT_MIN
        return [f"{r} = {negated} if {x} < 0 else {x}" if signed else f"{r} = {x}"]
    if name == "not":
        return [f"{r} = {t}(~{x})"]
    if name == "sign":
        if signed:
            return [f"{r} = {t}(1) if {x} > 0 else ({t}(-1) if {x} < 0 else {t}(0))"]
        return [f"{r} = {t}(1) if {x} > 0 else {t}(0)"]
    if name in ("maximum", "minimum"):
        cmp = ">" if name == "maximum" else "<"
        return [f"{r} = {x} if {x} {cmp} {a[1]} else {a[1]}"]
    if len(a) != 2:
        return None
    y = a[1]
    all_ones = f"{t}({u}({(1 << width) - 1}))"
    if name == "divide":  # truncating; x/0 = -1 (all ones); INT_MIN/-1 wraps
        if not signed:
            return [f"{r} = {all_ones} if {y} == 0 else {t}({x} // {y})"]
        return [f"if {y} == 0:", f"    {r} = {t}(-1)",
                f"elif {y} == -1:", f"    {r} = {negated}",
                "else:", f"    {r}_q = {x} // {y}",
                f"    if {x} % {y} != 0 and (({x} < 0) != ({y} < 0)):",
                f"        {r}_q += 1",
                f"    {r} = {t}({r}_q)"]
    if name == "remainder":  # sign of the dividend; x%0 = x; INT_MIN%-1 = 0
        if not signed:
            return [f"{r} = {x} if {y} == 0 else {t}({x} % {y})"]
        return [f"if {y} == 0:", f"    {r} = {x}",
                f"elif {y} == -1:", f"    {r} = {t}(0)",
                "else:", f"    {r}_m = {x} % {y}",
                f"    if {r}_m != 0 and (({r}_m < 0) != ({x} < 0)):",
                f"        {r}_m -= {y}",
                f"    {r} = {t}({r}_m)"]
    # Shifts: selects rather than branches (see vecmath.select), and the amount masked to
    # the width so the unselected shift is defined too.
    if name in ("shift_left", "shift_right_logical"):
        op = "<<" if name == "shift_left" else ">>"
        return [f"{r}_n = {u}({y})",
                f"{r} = select({r}_n >= {width}, {t}(0), "
                f"{t}({u}({u}({x}) {op} ({r}_n & {u}({width - 1})))))"]
    if name == "shift_right_arithmetic":  # amounts >= width fill with the sign bit
        return [f"{r}_n = {u}({y})",
                f"{r}_n = select({r}_n > {width - 1}, {u}({width - 1}), {r}_n)",
                f"{r} = {t}({s}({s}({x}) >> np.int64({r}_n)))"]
    return None


def _convert(r: str, x: str, source: np.dtype, target: np.dtype) -> list[str] | None:
    t = _nb(target)
    if target == BOOL:
        return [f"{r} = {x} != 0"]  # NaN -> True, like XLA
    if source == BOOL:
        return [f"{r} = {t}(1) if {x} else {t}(0)"]
    if source in FLOAT_DTYPES and target in INT_DTYPES:
        info = np.iinfo(target)
        width = 8 * target.itemsize
        low = -(2.0 ** (width - 1)) if target.kind == "i" else 0.0
        high = 2.0 ** (width - (1 if target.kind == "i" else 0))
        return [f"if {x} != {x}:", f"    {r} = {t}(0)",
                f"elif {x} <= {low!r}:", f"    {r} = {t}({info.min})",
                f"elif {x} >= {high!r}:", f"    {r} = {t}({info.max})",
                "else:", f"    {r} = {t}({x})"]
    return [f"{r} = {t}({x})"]  # int->int wraps, int->float and float->float round once


def literal(value, dtype: np.dtype) -> str:
    """A Numba expression of exactly ``value`` in ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return "True" if bool(value) else "False"
    if dtype in INT_DTYPES:
        return f"{_nb(dtype)}({int(value)})"
    v = float(value)
    if v != v:
        return f"{_nb(dtype)}(np.nan)"
    if v in (float("inf"), float("-inf")):
        return f"{_nb(dtype)}({'-' if v < 0 else ''}np.inf)"
    return f"{_nb(dtype)}({v!r})"  # repr round-trips the float64 holding the value exactly


def emit(op: Op, names: list[str], result: str) -> list[str] | None:
    """Statements computing ``op``'s result into ``result`` from operand locals ``names``;
    None when the op (or its dtypes/attributes) cannot be fused."""
    if len(op.results) != 1:
        return None
    out_type = op.results[0].type
    if not isinstance(out_type, TensorType) or out_type.dtype not in DTYPES:
        return None
    for v in op.operands:
        if not isinstance(v.type, TensorType) or v.type.dtype not in DTYPES:
            return None
    if not op.name.startswith(PREFIX):
        return None
    name = op.name[len(PREFIX):]
    dtype = op.operands[0].type.dtype if op.operands else out_type.dtype
    if name == "constant":  # rank 0 only (splat constants enter groups as these, broadcast)
        value = op.attributes.get("value")
        if out_type.shape != () or value is None or np.shape(value) != ():
            return None
        return [f"{result} = {literal(value, out_type.dtype)}"]
    if name == "convert":
        return _convert(result, names[0], dtype, out_type.dtype)
    if name == "select":
        t = _nb(out_type.dtype)
        return [f"{result} = select({names[0]}, {t}({names[1]}), {t}({names[2]}))"]
    if name == "compare":
        direction = op.attributes.get("comparison_direction")
        compare_type = op.attributes.get("compare_type", "NOTYPE")
        if direction not in _COMPARISONS or compare_type not in (
                "NOTYPE", "FLOAT", "SIGNED", "UNSIGNED"):
            return None
        a, b = names
        if compare_type in ("SIGNED", "UNSIGNED") and dtype in INT_DTYPES:
            view = _nb(_signed(dtype) if compare_type == "SIGNED" else _unsigned(dtype))
            a, b = f"{view}({a})", f"{view}({b})"
        elif compare_type in ("SIGNED", "UNSIGNED") and dtype != BOOL:
            return None
        elif compare_type == "FLOAT" and dtype not in FLOAT_DTYPES:
            return None
        return [f"{result} = {a} {_COMPARISONS[direction]} {b}"]
    if name == "is_finite":
        return [f"{result} = ({names[0]} - {names[0]}) == 0"] if dtype in FLOAT_DTYPES else None
    if name == "clamp":
        low, x, high = names
        dtype = op.operands[1].type.dtype
        if dtype == BOOL:
            return None
        fake_max = dataclasses.replace(op, name=PREFIX + "maximum")
        fake_min = dataclasses.replace(op, name=PREFIX + "minimum")
        first = emit(fake_max, [x, low], f"{result}_c")
        second = emit(fake_min, [f"{result}_c", high], result)
        return None if first is None or second is None else first + second
    if len(op.operands) not in (1, 2) or any(v.type.dtype != dtype for v in op.operands):
        return None
    if dtype in FLOAT_DTYPES:
        return _float_op(name, result, names, _nb(dtype))
    if dtype in INT_DTYPES:
        return _int_op(name, result, names, dtype)
    if name == "not":
        return [f"{result} = not {names[0]}"]
    if name in _BOOL_BINARY:
        return [f"{result} = {names[0]} {_BOOL_BINARY[name]} {names[1]}"]
    return None


def supports(op: Op) -> bool:
    names = [f"a{i}" for i in range(len(op.operands))]
    return emit(op, names, "r") is not None


# -- the kernel ----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class InputKind:
    """How the kernel reads one input: ``full`` (flat, the group's shape), ``scalar`` (one
    element, read once), ``broadcast`` (rank of the group, size-1 dims where it repeats; this
    aligned shape in ``aligned``) or ``strided`` (any C-contiguous array, e.g. the operand of a
    transpose; ``aligned`` holds its element stride along each dimension of the group)."""

    kind: str
    aligned: tuple[int, ...] = ()


def _module_digest(module: str) -> str:
    source = Path(importlib.util.find_spec(module).origin)
    return hashlib.sha256(source.read_bytes()).hexdigest()[:16]


def _module_imports() -> list[str]:
    """Import lines for the generated modules, with digests of the helper modules' sources:
    Numba's disk cache of a kernel is keyed by the kernel file alone, so a change to vecmath or
    rowreduce must change the kernel source (and so its file name, see ``cache``)."""
    names = ", ".join(f"{fn} as vm_{op}" for op, fn in sorted(FLOAT32_TRANSCENDENTALS.items()))
    return [f"# pjrtkit_cpu.vecmath {_module_digest('pjrtkit_cpu.vecmath')}",
            f"# pjrtkit_cpu.fusion.rowreduce {_module_digest('pjrtkit_cpu.fusion.rowreduce')}",
            f"from pjrtkit_cpu.vecmath import select, {names}",
            "from pjrtkit_cpu.fusion import rowreduce"]


# Lines every generated module starts with after the numpy/numba imports (helpers that
# ``emit`` may call: vecmath's select and transcendentals, rowreduce's reductions).
MODULE_IMPORTS = _module_imports()
_VECMATH_IMPORTS = MODULE_IMPORTS  # the name the native-loop emitter reads


# -- reductions ----------------------------------------------------------------------------------

_REDUCE_BODIES = {"stablehlo.add": "add", "stablehlo.maximum": "maximum",
                  "stablehlo.minimum": "minimum"}


def reduction_kind(op: Op) -> str | None:
    """"add", "maximum" or "minimum" when ``op`` is a ``stablehlo.reduce`` a fused loop can end
    in: one float32/float64 operand reduced over its innermost dimension only, with a rank-0
    init value and a body that is that one binary op of its two arguments."""
    if op.name != "stablehlo.reduce" or len(op.operands) != 2 or len(op.results) != 1:
        return None
    operand, init = op.operands
    if not isinstance(operand.type, TensorType) or operand.type.dtype not in FLOAT_DTYPES:
        return None
    if (not isinstance(init.type, TensorType) or init.type.shape != ()
            or init.type.dtype != operand.type.dtype or operand.type.rank == 0):
        return None
    if tuple(op.attributes.get("dimensions", ())) != (operand.type.rank - 1,):
        return None
    if len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
        return None
    block = op.regions[0].entry
    if len(block.arguments) != 2 or len(block.ops) != 2:
        return None
    inner, ret = block.ops
    if inner.name not in _REDUCE_BODIES or len(ret.operands) != 1 or (
            ret.operands[0].id != inner.results[0].id):
        return None
    a, b = (v.id for v in block.arguments)
    if tuple(v.id for v in inner.operands) not in ((a, b), (b, a)):
        return None
    return _REDUCE_BODIES[inner.name]


@dataclasses.dataclass(frozen=True)
class Reduction:
    """One reduced output of a fused loop: ``kind`` ("add", "maximum", "minimum") of the local
    ``operand`` over the innermost dimension, combined with the local ``init`` (read once)."""

    kind: str
    dtype: np.dtype
    operand: str
    init: str


def _combine(reduction: Reduction, row_value: str, result: str) -> list[str]:
    t = _nb(reduction.dtype)
    if reduction.kind == "add":
        return [f"{result} = {t}({reduction.init} + {row_value})"]
    return _float_op(reduction.kind, result, [reduction.init, row_value], t)


def _row_reduce_call(reduction: Reduction, buffer: str) -> str:
    if reduction.kind == "add":
        return f"rowreduce.sum_row({buffer}, {_nb(reduction.dtype)}(0))"
    width = 8 * reduction.dtype.itemsize
    return f"rowreduce.{'max' if reduction.kind == 'maximum' else 'min'}_row_f{width}({buffer})"


# -- the loop ------------------------------------------------------------------------------------

def _strides(shape: tuple[int, ...]) -> list[int]:
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return out[::-1]


def generate(shape: tuple[int, ...], inputs: list[InputKind], body: list[str],
             results: list[str], input_locals: list[str],
             reductions: dict[str, Reduction] | None = None) -> str:
    """The module source defining ``kernel(in0, ..., out0, ...)``; every argument is a flat
    C-contiguous array (a broadcast input holds its ``aligned`` shape flattened).

    ``body`` are the statements of all ops (in order), reading ``input_locals[i]`` for input i
    and leaving each output's value in ``results[j]``. An output whose name is a key of
    ``reductions`` is that reduction of each row (its shape is the group's without the last
    dimension); the others have the group's ``shape``.

    Without broadcast inputs or reductions the kernel is one flat loop. Otherwise it is two
    loops: rows (all leading dimensions flattened; deeper nests measured up to 10x slower with
    long bodies, LLVM vectorizes them badly) and the last dimension, whose loop reads every
    operand at a unit or zero stride (row-invariant broadcast values are loaded once per row;
    only transposed inputs have other strides), so LLVM can vectorize. A reduced value is
    stored into a row buffer, reduced by ``rowreduce`` after the row.
    """
    reductions = reductions or {}
    args = [f"in{i}" for i in range(len(inputs))] + [f"out{j}" for j in range(len(results))]
    lines = ["import math", "import numpy as np", "from numba import njit", *MODULE_IMPORTS,
             "", "",
             '@njit(cache=True, error_model="numpy", nogil=True, boundscheck=False)',
             f"def kernel({', '.join(args)}):"]
    ind = "    "
    for i, kind in enumerate(inputs):
        if kind.kind == "scalar":
            lines.append(f"{ind}{input_locals[i]} = in{i}[0]")
    broadcasts = [i for i, k in enumerate(inputs) if k.kind in ("broadcast", "strided")]
    if len(shape) == 1:
        # (a rank-1 broadcast input is one element: read it as a scalar)
        for i in broadcasts:
            lines.append(f"{ind}{input_locals[i]} = in{i}[0]")
        broadcasts = []
    if not broadcasts and not reductions:
        lines.append(f"{ind}for k in range({int(np.prod(shape))}):")
        pad = ind * 2
        lines.extend(f"{pad}{input_locals[i]} = in{i}[k]" for i, k in enumerate(inputs)
                     if k.kind == "full")
        lines.extend(pad + line for line in body)
        lines.extend(f"{pad}out{j}[k] = {name}" for j, name in enumerate(results))
        return "\n".join(lines) + "\n"
    lines.append(f"{ind}for r in range({int(np.prod(shape[:-1]))}):")
    sources = [("array", f"in{i}") for i in range(len(inputs))]
    targets = [[("array", f"out{j}")] for j in range(len(results))]
    setup, row = stage_row(shape, inputs, body, results, input_locals, reductions, sources,
                           targets, ind * 2)
    lines[-1:-1] = [ind + line for line in setup]
    lines.extend(row)
    return "\n".join(lines) + "\n"


def stage_row(shape: tuple[int, ...], inputs: list[InputKind], body: list[str],
              results: list[str], input_locals: list[str], reductions: dict[str, Reduction],
              sources: list[tuple[str, str]], targets: list[list[tuple[str, str]]], pad: str,
              tag: str = "") -> tuple[list[str], list[str]]:
    """One row of a fused group (rank >= 2): (lines before the row loop, unindented; lines of
    the row, indented by ``pad``). The row loop defines ``r``; scalar inputs are read by the
    caller before the loop.

    ``sources[i]`` says where input i comes from: ``("array", name)`` (a flat array read per its
    kind), ``("local", expr)`` (a value constant along the row: ``input_locals[i] = expr`` once
    per row) or ``("rowbuf", name)`` (a full input held in a row buffer, read at ``[c]``).
    ``targets[j]`` lists where output j goes: ``("array", name)`` (``[k]``, or ``[r]`` for a
    reduction) or ``("rowbuf", name)``; a reduction's value is also left in its local after
    the row. ``tag`` prefixes the names this row introduces (several stages in one kernel).
    """
    n = shape[-1]
    below = _strides(shape[:-1])  # rows per step of each leading dimension
    setup: list[str] = []
    # A reduction of an input as it is reads that input's row in place; others store the
    # reduced value into a row buffer.
    row_of_input = {}
    for i, (where, name) in enumerate(sources):
        if where == "array" and inputs[i].kind == "full":
            row_of_input[input_locals[i]] = f"{name}[o:o + {n}]"
        elif where == "rowbuf":
            row_of_input[input_locals[i]] = name
    for j, name in enumerate(results):  # (an output held in a row buffer: reduced there)
        if name not in reductions:
            row_of_input.update((name, target) for where, target in targets[j]
                                if where == "rowbuf")
    direct = {}
    buffers = {}
    for j, name in enumerate(results):
        if name not in reductions or name in buffers or name in direct:
            continue
        if reductions[name].operand in row_of_input:
            direct[name] = row_of_input[reductions[name].operand]
        else:
            buffers[name] = f"{tag}row{j}"
            setup.append(f"{tag}row{j} = np.empty({n}, {_nb(reductions[name].dtype)})")
    lines = [f"{pad}o = r * {n}"]
    inner_stride = {}
    for i, (where, name) in enumerate(sources):
        if inputs[i].kind == "scalar":
            continue
        if where == "local":
            lines.append(f"{pad}{input_locals[i]} = {name}")
            continue
        if where != "array" or inputs[i].kind not in ("broadcast", "strided"):
            continue
        aligned = inputs[i].aligned
        strides = (list(aligned) if inputs[i].kind == "strided" else
                   [0 if a == 1 and size != 1 else st
                    for a, size, st in zip(aligned, shape, _strides(aligned))])
        terms = [f"((r // {below[d]}) % {shape[d]}) * {strides[d]}"
                 for d in range(len(shape) - 1) if strides[d]]
        lines.append(f"{pad}{tag}p{i} = {' + '.join(terms) if terms else '0'}")
        inner_stride[i] = strides[-1]
        if not strides[-1]:  # constant along the row: loaded once per row
            lines.append(f"{pad}{input_locals[i]} = {name}[{tag}p{i}]")
    lines.append(f"{pad}for c in range({n}):")
    inner = pad + "    "
    lines.append(f"{inner}k = o + c")
    for i, (where, name) in enumerate(sources):
        kind = inputs[i].kind
        if where == "rowbuf":
            lines.append(f"{inner}{input_locals[i]} = {name}[c]")
        elif where != "array":
            continue
        elif kind == "full":
            lines.append(f"{inner}{input_locals[i]} = {name}[k]")
        elif kind in ("broadcast", "strided") and inner_stride[i]:
            step = "c" if inner_stride[i] == 1 else f"c * {inner_stride[i]}"
            lines.append(f"{inner}{input_locals[i]} = {name}[{tag}p{i} + {step}]")
    lines.extend(inner + line for line in body)
    for name, buffer in buffers.items():
        lines.append(f"{inner}{buffer}[c] = {reductions[name].operand}")
    for j, name in enumerate(results):
        if name not in reductions:
            for where, target in targets[j]:
                lines.append(f"{inner}{target}[{'c' if where == 'rowbuf' else 'k'}] = {name}")
    for name, row in {**buffers, **direct}.items():
        reduction = reductions[name]
        lines.append(f"{pad}{name}_row = {_row_reduce_call(reduction, row)}")
        lines.extend(pad + line for line in _combine(reduction, f"{name}_row", name))
    for j, name in enumerate(results):
        if name in reductions:
            lines.extend(f"{pad}{target}[r] = {name}" for where, target in targets[j]
                         if where == "array")
    return setup, lines
