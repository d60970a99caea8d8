"""The run-time kernel of a fused group: the unfused plan until the Numba loop is ready."""
from __future__ import annotations


import numpy as np

from pjrtkit.stablehlo.ir import TERMINATORS, Op

from pjrtkit_cpu.fusion import cache, codegen
from pjrtkit_cpu.loopnest import optable
from pjrtkit_cpu.loopnest.values import INT_DTYPES, literal

# Calls served by the fused loop vs by the unfused plan (tests and profiling read these).
STATS = {"fused": 0, "unfused": 0}


def chain_name(op: Op) -> str:
    """What a fused op computes, for messages: ``the fused loop tanh, multiply, add over
    float32[128, 128]``."""
    names = [inner.name.removeprefix("stablehlo.") for inner in op.regions[0].entry.ops
             if inner.name not in TERMINATORS and inner.name not in codegen.ABSORBED]
    dtype = op.results[0].type.dtype if op.results else ""
    return (f"the fused loop {', '.join(dict.fromkeys(names))} over "
            f"{getattr(dtype, 'name', dtype)}{list(op.attributes['shape'])}")


def kernel_source(op: Op) -> str:
    """Numba source for the fused op's region (see ``rewrite``)."""
    parts = stage_parts(op)
    return codegen.generate(tuple(op.attributes["shape"]), *parts)


def stage_parts(op: Op, tag: str = ""):
    """The pieces ``codegen.generate`` takes after the shape, for the fused op ``op``: input
    kinds, body statements, result locals, input locals and reductions; every local name
    starts with ``tag``."""
    block = op.regions[0].entry
    kinds = [codegen.InputKind(kind, aligned) for kind, aligned in op.attributes["input_kinds"]]
    local: dict[int, str] = {}
    input_locals = []
    for i, arg in enumerate(block.arguments):
        local[arg.id] = f"{tag}x{i}"
        input_locals.append(f"{tag}x{i}")
    body: list[str] = []
    # Inputs that are constants (see rewrite) arrive as arguments like any rank-0 input, so
    # programs that differ only in their constants share one kernel; only an integer divisor
    # is written into the source (see ``baked_literals``).
    for i, value in baked_literals(op):
        arg = block.arguments[i]
        body.append(f"{local[arg.id]} = {literal(value, arg.type.dtype)}")
    results: list[str] = []
    reductions: dict[str, codegen.Reduction] = {}
    for n, inner in enumerate(block.ops):
        if inner.name in TERMINATORS:
            results = [local[v.id] for v in inner.operands]
            break
        if inner.name in codegen.ABSORBED:  # reads its input's element for this index
            local[inner.results[0].id] = local[inner.operands[0].id]
            continue
        name = f"{tag}v{n}"
        kind = codegen.reduction_kind(inner)
        if kind is not None:  # an output, reduced row by row (see codegen.generate)
            operand, init = (local[v.id] for v in inner.operands)
            reductions[name] = codegen.Reduction(kind, inner.results[0].type.dtype,
                                                 operand, init)
            local[inner.results[0].id] = name
            continue
        lines = optable.emit(inner, [local[v.id] for v in inner.operands], name)
        if lines is None:
            raise ValueError(f"cannot fuse {inner.describe()}")
        body.extend(lines)
        local[inner.results[0].id] = name
    return kinds, body, results, input_locals, reductions


# Ops whose second operand LLVM strength-reduces when it is a known integer (a multiply and
# shifts instead of one hardware division per element, which does not vectorize).
_DIVISIONS = frozenset({"stablehlo.divide", "stablehlo.remainder"})


def baked_literals(op: Op) -> list[tuple[int, object]]:
    """The (input index, value) pairs of the fused op's constant inputs (attribute
    ``literals``) that its kernel source holds as literals: those read as the divisor of an
    integer division or remainder, directly or through an absorbed broadcast. Every other
    constant is read from its argument, so the kernel's text (its cache key, see ``cache``)
    does not depend on it."""
    literals = op.attributes.get("literals", ())
    if not literals:
        return []
    block = op.regions[0].entry
    source = {arg.id: i for i, arg in enumerate(block.arguments)}  # value id -> input index
    divisors = set()
    for inner in block.ops:
        if inner.name in codegen.ABSORBED and inner.operands[0].id in source:
            source[inner.results[0].id] = source[inner.operands[0].id]
        elif (inner.name in _DIVISIONS and inner.results[0].type.dtype in INT_DTYPES
              and inner.operands[1].id in source):
            divisors.add(source[inner.operands[1].id])
    return [(i, value) for i, value in literals if i in divisors]


# Attribute of a fused op that is the whole of its program (``fusion.whole``): its kernel is
# compiled when ``fusion.whole.WholeProgram`` says, with a C entry point added.
WHOLE_PROGRAM = "whole_program"


class FusedKernel(cache.BackgroundCompiled):
    """Calls the fused loop once compiled, the unfused plan of the region before (or if the
    compile failed, or an input cannot be passed as a contiguous array)."""

    __slots__ = ("_fallback", "_prepare", "_outputs", "_shape", "_deferred", "_chain")
    # _outputs: (dtype, shape, size) per result: the group's shape, or a reduced one

    def __init__(self, op: Op, fallback):
        self._fallback = fallback
        shape = tuple(op.attributes["shape"])
        self._shape = shape
        self._outputs = tuple((v.type.dtype, v.type.shape, int(np.prod(v.type.shape)))
                              for v in op.results)
        size = int(np.prod(shape))
        self._prepare = tuple(_preparer(kind, aligned, size)
                              for kind, aligned in op.attributes["input_kinds"])
        signature = [(v.type.dtype, 1, True) for v in op.operands]
        signature += [(dtype, 1, False) for dtype, _, _ in self._outputs]
        self._chain = chain_name(op)
        if op.attributes.get(WHOLE_PROGRAM):
            # Compiled by whoever claims it (fusion.whole.WholeProgram), else at the first call.
            self._fast = self.future = self._retry = None
            self._deferred = (kernel_source(op), signature)
        else:
            self._deferred = None
            self._compile_in_background(kernel_source(op), signature, self._chain)

    def claim(self) -> tuple[str, list] | None:
        """A whole program's kernel (``WHOLE_PROGRAM``) is compiled by the caller from now on
        (``compile_with``): its (source, signature), or None when it is not such a kernel or
        is claimed already."""
        deferred, self._deferred = self._deferred, None
        return deferred

    def compile_with(self, source: str, signature: list, then) -> None:
        """Compile ``source`` (a claimed kernel's module and more) as this kernel's loop;
        ``then(future)`` once each try's compile (of its dispatcher) is done."""
        self._compile_in_background(source, signature, self._chain, then)

    def __call__(self, *args):
        fast = self._fast
        if fast is None:
            if self._deferred is not None:  # a whole program's kernel nobody claimed
                self._compile_in_background(*self.claim(), self._chain)
            elif self._retry is not None:
                self._retry_skipped()
            STATS["unfused"] += 1
            return self._fallback(*args)
        outs = [np.empty(size, dtype) for dtype, _, size in self._outputs]
        fast(*[prepare(a) for prepare, a in zip(self._prepare, args)], *outs)
        STATS["fused"] += 1
        return tuple(o.reshape(shape) for o, (_, shape, _) in zip(outs, self._outputs))


def _preparer(kind: str, aligned: tuple[int, ...], size: int):
    if kind == "full":
        return lambda a: np.ascontiguousarray(a).reshape(size)
    if kind == "scalar":
        return lambda a: np.reshape(a, (1,))
    return lambda a: np.ascontiguousarray(a).reshape(-1)  # row-major order = aligned order
