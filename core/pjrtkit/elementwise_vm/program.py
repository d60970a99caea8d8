"""Rendering a block of elementwise ops into a program of the elementwise VM.

``render`` takes a block whose ops are StableHLO elementwise ops (plus ops that only read their
operand's element for the same index, such as a broadcast of a scalar, and an optional
contracted multiply-add op), the block's inputs (each a program argument or a constant, read
element by element or as one scalar) and which values are the outputs. Each op becomes the VM
operations of its meaning: ``pjrtkit.semantics.definitions`` gives the op's expression and
``semantics.scalar.schedule`` rewrites it into the operations the C table spells
(``spellings``), exactly as the NumPy renderer (``pjrtkit.reference.elementwise_numpy``) does
for its own table; float32 transcendentals are computed in float64 and rounded once, as
there. Anything the table cannot write (a dtype outside ``spellings.DTYPES``, an operation
with no spelling and no definition) makes ``render`` return None with the reason in
``Declined``: the caller keeps its other path.

The program is one int64 array (layout in ``vm.c``); the C function ``ADDRESS`` runs it with
the calling convention of ``pjrtkit.types.NativeKernel``.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

from pjrtkit.elementwise_vm import spellings
from pjrtkit.semantics import definitions, float32_functions, ops
from pjrtkit.semantics.float32_functions import is_float32_function, renderer_root
from pjrtkit.semantics.scalar import Expr, Undefined, schedule
from pjrtkit.stablehlo.ir import TERMINATORS, Block, TensorType

RENDERER = "pjrtkit's elementwise VM"
# The code layout's version and the registers of one program (inputs, constants and
# temporaries; each holds one chunk): _build.py compiles the same numbers into vm.c (a test
# checks they agree).
VERSION = 1
MAX_REGISTERS = 96
INSTRUCTION_WORDS = 8
# Input sources (vm.c)
_ARGUMENT, _ADDRESS, _IMMEDIATE = 0, 1, 2


class Declined(Exception):
    """The block cannot be a VM program; the message says why."""


@dataclasses.dataclass(frozen=True)
class Input:
    """One input of the block: program argument ``argument``, or the array ``constant``; read
    at every element index (``scalar`` False: it has the block's element count) or as its one
    element broadcast (``scalar`` True)."""

    dtype: np.dtype
    scalar: bool
    argument: int | None = None
    constant: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class Program:
    """A rendered program: ``code`` is the VM's context (``NativeKernel.context`` is its
    address), ``keepalive`` the arrays it points into."""

    code: np.ndarray
    keepalive: tuple

    @property
    def context(self) -> int:
        return int(self.code.ctypes.data)


def _typed(node: Expr) -> np.dtype:
    if node.op == "select":
        return node.dtype
    return node.args[0].dtype if node.args else node.dtype


def _name(node: Expr) -> str:
    if node.op == "compare":
        return f"compare_{node.attr[0]}"
    return node.op


def _spelled(node: Expr) -> bool:
    if node.op == "compare" and node.attr[1] != "NOTYPE":
        return False
    operands = spellings.SPELLED.get((_name(node), _typed(node).name, node.dtype.name))
    return operands is not None and operands == tuple(a.dtype.name for a in node.args)


class _Builder:
    def __init__(self, inputs: list[Input]):
        self.inputs = []  # [source, value word, dtype code, scalar] per input register
        self.keep = []    # the constants' arrays the program points into
        self.immediates: dict[tuple, tuple] = {}  # immediate row -> its register
        for i in inputs:
            self._input(i)

    def _input(self, i: Input) -> None:
        code = spellings.DTYPE_CODE.get(np.dtype(i.dtype).name)
        if code is None:
            raise Declined(f"{np.dtype(i.dtype).name}: {RENDERER} computes only in "
                           f"{', '.join(spellings.DTYPES)}")
        if i.argument is not None:
            self.inputs.append([_ARGUMENT, int(i.argument), code, int(i.scalar)])
        else:
            array = np.ascontiguousarray(i.constant, dtype=i.dtype).reshape(-1)
            self.keep.append(array)
            self.inputs.append([_ADDRESS, int(array.ctypes.data), code, int(i.scalar)])

    def immediate(self, value, dtype: np.dtype) -> tuple:
        """A register holding the constant ``value`` (its bits in the code itself); one
        register per distinct constant (the float32 functions repeat theirs)."""
        word = np.zeros(1, np.int64)
        raw = np.asarray(value, dtype).tobytes()
        word.view(np.uint8)[:len(raw)] = np.frombuffer(raw, np.uint8)
        row = [_IMMEDIATE, int(word[0]), spellings.DTYPE_CODE[dtype.name], 1]
        key = tuple(row)
        if key not in self.immediates:
            self.inputs.append(row)
            self.immediates[key] = ("input", len(self.inputs) - 1)
        return self.immediates[key]


def render(block: Block, inputs: list[Input], outputs: list[int], size: int,
           absorbed: frozenset = frozenset(), multiply_add: str | None = None) -> Program:
    """The VM program computing ``block`` over ``size`` elements: its arguments are
    ``inputs`` (in order), its results the block values with ids ``outputs`` (program output
    j is ``outputs[j]``). ``absorbed``: op names whose result is their operand's element at
    the same index (a broadcast of a scalar); ``multiply_add``: the name of an op computing
    ``a * b + c`` rounded once (attributes ``negate_product``: ``c - a * b``,
    ``negate_addend``: ``a * b - c``). Raises ``Declined`` when the VM cannot run it."""
    if len(block.arguments) != len(inputs):
        raise Declined("the block's arguments and the inputs differ in number")
    b = _Builder(inputs)
    # value id -> ("input", index) or ("temp", id); temporaries get registers at the end
    where: dict[int, tuple] = {arg.id: ("input", k) for k, arg in enumerate(block.arguments)}
    steps: list[tuple[str, str, str, tuple, object]] = []  # (op, typed, out, operands, result)
    counter = [0]

    def temp():
        counter[0] += 1
        return ("temp", counter[0])

    def emit(op: str, typed, out, operands) -> tuple:
        key = (op, np.dtype(typed).name, np.dtype(out).name)
        if key not in spellings.SPELLED:
            raise Declined(f"{RENDERER} has no loop for {op} on {key[1]}")
        result = temp()
        steps.append((*key, tuple(operands), result))
        return result

    for op in block.ops:
        if op.name in TERMINATORS:
            break
        if op.name in absorbed:
            where[op.results[0].id] = where[op.operands[0].id]
            continue
        types = [v.type for v in (*op.operands, *op.results)]
        if len(op.results) != 1 or op.regions or not all(isinstance(t, TensorType)
                                                          for t in types):
            raise Declined(f"{op.name}: not one array result without regions")
        dtypes = [v.type.dtype for v in op.operands]
        out = op.results[0].type.dtype
        operands = [where[v.id] for v in op.operands]
        if multiply_add is not None and op.name == multiply_add:
            x, y, z = operands
            if op.attributes.get("negate_product"):
                x = emit("negate", dtypes[0], dtypes[0], [x])
            if op.attributes.get("negate_addend"):
                z = emit("negate", dtypes[2], dtypes[2], [z])
            where[op.results[0].id] = emit("multiply_add", out, out, [x, y, z])
            continue
        if not op.name.startswith(ops.PREFIX) or op.name[len(ops.PREFIX):] not in ops.ELEMENTWISE:
            raise Declined(f"{op.name} is not an elementwise op")
        name = op.name[len(ops.PREFIX):]
        if is_float32_function(name, dtypes, out):  # one instruction: float32_source.h
            where[op.results[0].id] = emit(FUNCTION_PREFIX + name, out, out, operands)
            continue
        root = renderer_root(name, dtypes, out, op.attributes)
        where[op.results[0].id] = _emit_expression(b, emit, root, operands)
    return _assemble(b, steps, [where[v] for v in outputs], size)


def _emit_expression(b: _Builder, emit, root: Expr, operands: list[tuple]) -> tuple:
    """Emit the instructions computing ``root`` (its ``arg`` k is ``operands[k]``); returns
    the value holding the result."""
    try:
        order = schedule(root, _spelled, definitions.define, RENDERER)
    except Undefined as exc:
        raise Declined(str(exc)) from None
    local: dict[int, tuple] = {}
    for node in order:
        if node.op == "arg":
            local[id(node)] = operands[node.attr]
        elif node.op == "const":
            if node.dtype.name not in spellings.DTYPE_CODE:
                raise Declined(f"a constant of {node.dtype.name}")
            local[id(node)] = b.immediate(node.attr, node.dtype)
        else:
            local[id(node)] = emit(_name(node), _typed(node), node.dtype,
                                   [local[id(a)] for a in node.args])
    return local[id(order[-1])]


# The VM's operation computing float32_functions.FUNCTIONS[name] whole (float32_source.h).
FUNCTION_PREFIX = "float32_"


def render_float32_function(name: str) -> Program:
    """The one-instruction program computing shared float32 function ``name`` (its element
    count, code word 1, is 0, for the caller to set)."""
    b = _Builder([Input(np.dtype(np.float32), False, argument=0)])
    step = (FUNCTION_PREFIX + name, "float32", "float32", (("input", 0),), ("temp", 1))
    return _assemble(b, [step], [("temp", 1)], 0)


def _c_float(value: float, dtype: np.dtype) -> str:
    """A C literal of exactly ``value`` (hexadecimal; math.h's names for the non-finite)."""
    if value != value:
        return "NAN"
    if value in (float("inf"), float("-inf")):
        return "INFINITY" if value > 0 else "-INFINITY"
    return value.hex() + ("f" if dtype == np.float32 else "")


def float32_c_source() -> str:
    """C functions ``pjrtkit_f32_<name>(float)`` computing the shared float32 functions,
    generated from their expressions through this table's spellings (so they compute what
    the VM computes instruction by instruction, and what vecmath's loops compute). The VM
    builds them from the committed ``float32_source.h``; a test checks it is this text."""
    lines = ["/* Generated by pjrtkit.elementwise_vm.program.float32_c_source() from",
             "   pjrtkit.semantics.float32_functions; do not edit (a test compares). */"]
    for name in sorted(float32_functions.FUNCTIONS):
        root = renderer_root(name, [np.float32], np.float32)
        order = schedule(root, _spelled, definitions.define, RENDERER)
        # a copy for CPUs with FMA (fmaf one instruction, not a libm call), chosen at load
        lines.append(f'__attribute__((target_clones("fma", "default"))) '
                     f"static float pjrtkit_f32_{name}(float x0) {{")
        value: dict[int, str] = {}
        for k, node in enumerate(order):
            if node.op == "arg":
                value[id(node)] = f"x{node.attr}"
                continue
            ctype, unsigned, signed, bits = spellings.CTYPES[node.dtype.name]
            target = f"v{k}"
            if node.op == "const":
                literal = (_c_float(float(node.attr), node.dtype) if node.dtype.kind == "f"
                           else f"INT64_C({int(node.attr)})")
                lines.append(f"    const {ctype} {target} = ({ctype}){literal};")
            else:
                key = (_name(node), _typed(node).name, node.dtype.name)
                expression = spellings.EXPRESSION[key]
                args = [value[id(a)] for a in node.args]
                if expression == "BITCAST":
                    lines.append(f"    {ctype} {target}; memcpy(&{target}, &{args[0]}, "
                                 f"sizeof {target});")
                else:
                    _, typed_unsigned, typed_signed, typed_bits = spellings.CTYPES[key[1]]
                    names = {"a": None, "b": None, "c": None, "T": ctype,
                             "U": typed_unsigned, "S": typed_signed, "BITS": str(typed_bits)}
                    names.update(zip("abc", args))
                    text = re.sub(r"\b(a|b|c|T|U|S|BITS)\b",
                                  lambda m, names=names: names[m.group(1)], expression)
                    lines.append(f"    const {ctype} {target} = ({ctype})({text});")
            value[id(node)] = target
        lines += [f"    return {value[id(order[-1])]};", "}"]
    return "\n".join(lines) + "\n"


def _assemble(b: _Builder, steps, results, size: int) -> Program:
    """The code array: registers 0.. are the inputs and constants, then temporaries, each
    reused once the value it held has had its last use (never by the instruction making that
    last use: the C loops read and write one element index at a time, and a result wider than
    an operand would overwrite elements not read yet)."""
    n_in = len(b.inputs)
    last_use: dict[tuple, int] = {}
    for k, (*_, operands, _result) in enumerate(steps):
        for v in operands:
            last_use[v] = k
    for v in results:
        last_use[v] = len(steps)
    register: dict[tuple, int] = {}
    free: list[int] = []
    count = n_in

    def reg(v) -> int:
        return v[1] if v[0] == "input" else register[v]

    code_steps = []
    for k, (op, typed, out, operands, result) in enumerate(steps):
        sources = [reg(v) for v in operands]
        # the result never takes an operand's register (their element widths may differ):
        # operands whose last use this is are freed after it is placed
        if free:
            register[result] = free.pop()
        else:
            register[result] = count
            count += 1
        for v in set(operands):
            if v[0] == "temp" and last_use.get(v) == k:
                free.append(register[v])
        code_steps.append([spellings.case_key(op, typed, out), register[result],
                           *(sources + [0, 0, 0])[:3]])
    if count > MAX_REGISTERS:
        raise Declined(f"{count} registers (the VM has {MAX_REGISTERS})")
    code = [VERSION, int(size), n_in, len(results), count, len(code_steps), 0, 0]
    for row in b.inputs:
        code += row
    for row in code_steps:
        code += row + [0] * (INSTRUCTION_WORDS - len(row))
    for j, v in enumerate(results):
        dtype = _result_dtype(v, steps, b)
        code += [reg(v), j, dtype]
    return Program(np.array(code, dtype=np.int64), tuple(b.keep))


def _result_dtype(v, steps, b: _Builder) -> int:
    if v[0] == "input":
        return b.inputs[v[1]][2]
    for *key, _operands, result in steps:
        if result == v:
            return spellings.DTYPE_CODE[key[2]]
    raise AssertionError(v)
