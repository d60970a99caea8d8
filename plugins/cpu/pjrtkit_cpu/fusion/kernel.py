"""The run-time kernel of a fused group: the unfused plan until the Numba loop is ready."""
from __future__ import annotations


import numpy as np

from pjrtkit.stablehlo.ir import TERMINATORS, Op

from pjrtkit_cpu.fusion import cache, codegen
from pjrtkit_cpu.loopnest import optable
from pjrtkit_cpu.loopnest.values import literal

# Calls served by the fused loop vs by the unfused plan (tests and profiling read these).
STATS = {"fused": 0, "unfused": 0}


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
    # Inputs that are constants (see rewrite): the loop uses the value itself.
    for i, value in op.attributes.get("literals", ()):
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


class FusedKernel(cache.BackgroundCompiled):
    """Calls the fused loop once compiled, the unfused plan of the region before (or if the
    compile failed, or an input cannot be passed as a contiguous array)."""

    __slots__ = ("_fallback", "_prepare", "_outputs", "_shape")
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
        self._compile_in_background(kernel_source(op), signature)

    def __call__(self, *args):
        fast = self._fast
        if fast is None:
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
