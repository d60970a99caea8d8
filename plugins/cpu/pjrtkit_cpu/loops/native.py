"""A whole ``stablehlo.while`` (cond and body, calls inlined) as one Numba function.

Interpreted, each iteration of a small loop pays a plan call for the cond and for the body and
~0.5-1 us per NumPy call on tiny arrays: ~4.5 us per ``fori_loop`` step whose arithmetic takes
nanoseconds. When every op of the loop is supported by the emitters (see ``ops``), the loop
becomes one function ``kernel(carries..., captures..., constants...)`` over flat arrays:
rank-0 carries live in locals, per-iteration values in buffers allocated once, carried arrays
are updated in place at the end of each iteration (or by in-place updates from ``ownership``).

Compilation goes through the fused-loop cache (``fusion.cache``: background thread, disk cache
under ``$PJRTKIT_CACHE_DIR/fused``), so compiling a program never waits for Numba: the
interpreted loop runs until the native one is ready, or forever if it fails to compile. A call
that is running interpreted when the compile lands goes on natively from its current iteration
(``NativeLoopKernel.resume``).
Anything unsupported leaves the interpreted loop alone. ``STATS`` counts calls of each.
"""
from __future__ import annotations

import logging
import os

import numpy as np

from pjrtkit.stablehlo.ir import TERMINATORS, Block, Op

from pjrtkit_cpu.fusion import cache
from pjrtkit_cpu.loopnest import module
from pjrtkit_cpu.loops.emitter import (INDENT, LoopSource, Unsupported, Val, carry_updates,
                                        rank0_expr, tensor_type)
from pjrtkit_cpu.loops.ops import OP_TABLE, chainable_values, emit_op

log = logging.getLogger(__name__)

ENABLED = os.environ.get("PJRTKIT_CPU_NATIVE_LOOPS", "1") not in ("", "0")
# Calls served by native loops vs by the interpreted loop, and interpreted calls that went on
# natively when the compile landed mid-call (tests and profiling read these).
STATS = {"native": 0, "interpreted": 0, "resumed": 0}
__all__ = ["OP_TABLE", "STATS", "LoopSpec", "NativeLoopKernel", "native_loop"]


def native_loop(op: Op, ctx, cond: Block, body: Block, owned, interpreted):
    """The while kernel: ``interpreted`` until a native loop for ``op`` is compiled, or
    ``interpreted`` itself when the loop cannot be compiled natively."""
    if not ENABLED or not hasattr(ctx, "captures"):
        return interpreted
    try:
        spec = LoopSpec(op, ctx.captures(op), cond, body)
    except Unsupported as exc:
        log.debug("pjrtkit_cpu: while loop stays interpreted: %s", exc)
        return interpreted
    except Exception as exc:  # noqa: BLE001 - a bug in the loop compiler must not fail the compile
        cache.report_fallback(f"generating the native loop {op.describe()}", exc,
                              "the loop stays interpreted")
        return interpreted
    return NativeLoopKernel(spec, interpreted)


class LoopSpec:
    """The generated source and the calling convention of one native loop."""

    def __init__(self, op: Op, captures, cond: Block, body: Block):
        self.name = op.describe()  # for messages
        src = LoopSource(emit_op)
        terminator = body.ops[-1]
        if terminator.name not in TERMINATORS or cond.ops[-1].name not in TERMINATORS:
            raise Unsupported("blocks without a terminator")
        self.types = [tensor_type(v) for v in op.operands]
        self.passthrough = frozenset(p for p, v in enumerate(terminator.operands)
                                     if v is body.arguments[p])
        self.capture_types = [tensor_type(v) for v in captures]
        params = []
        for p, t in enumerate(self.types):
            params.append(f"c{p}")
            if t.shape:
                val = Val("array", f"c{p}", t.shape, t.dtype)
            else:
                src.prologue.append(f"s_c{p} = c{p}[0]")
                val = Val("scalar", f"s_c{p}", (), t.dtype)
            for block in (cond, body):
                src.bind(block.arguments[p], val)
                if p in self.passthrough:
                    src.invariant.add(block.arguments[p].id)
        for j, (v, t) in enumerate(zip(captures, self.capture_types)):
            params.append(f"x{j}")
            if t.shape:
                src.bind(v, Val("array", f"x{j}", t.shape, t.dtype))
            else:
                src.prologue.append(f"s_x{j} = x{j}[0]")
                src.bind(v, Val("scalar", f"s_x{j}", (), t.dtype))
            src.invariant.add(v.id)
        src.chainable = chainable_values((cond, body))
        cond_lines: list[str] = []
        for inner in cond.ops[:-1]:
            emit_op(src, inner, cond_lines)
        pred = rank0_expr(src.get(cond.ops[-1].operands[0]), "loop condition")
        body_lines: list[str] = []
        for inner in body.ops[:-1]:
            emit_op(src, inner, body_lines)
        homes = [f"c{p}" if t.shape else f"s_c{p}" for p, t in enumerate(self.types)]
        body_lines += carry_updates(src, terminator.operands, homes, self.types)
        self.constants = tuple(src.constant_args)
        params += [f"k{i}" for i in range(len(self.constants))]
        lines = [f"def kernel({', '.join(params)}):"]
        lines += [INDENT + line for line in src.prologue]
        lines.append(f"{INDENT}while True:")
        lines += [2 * INDENT + line for line in cond_lines]
        lines.append(f"{2 * INDENT}if not {pred}:")
        lines.append(f"{3 * INDENT}break")
        lines += [2 * INDENT + line for line in body_lines]
        lines += [f"{INDENT}c{p}[0] = s_c{p}" for p, t in enumerate(self.types)
                  if not t.shape and p not in self.passthrough]
        self.source = module.kernel_module(lines, list(src.helpers.values()))
        self.signature = ([(t.dtype, 1, p in self.passthrough) for p, t in enumerate(self.types)]
                          + [(t.dtype, 1, True) for t in self.capture_types]
                          + [(c.dtype, 1, True) for c in self.constants])


class NativeLoopKernel(cache.BackgroundCompiled):
    """The while kernel: the native loop once compiled, the interpreted one before (or if the
    compile failed)."""

    __slots__ = ("_spec", "_interpreted")

    def __init__(self, spec: LoopSpec, interpreted):
        self._spec = spec
        self._interpreted = interpreted
        self._compile_in_background(spec.source, spec.signature, f"the native loop {spec.name}")

    @property
    def ready(self) -> bool:
        """Whether the native loop is compiled (an interpreted call in flight switches to it:
        ``resume``)."""
        return self._fast is not None

    def resume(self, carried, captures):
        """The loop's results, going on natively from ``carried`` (the carries after some
        iterations an interpreted call ran; while's semantics are the same from any iteration's
        carries). A long loop whose compile lands while its first call runs (numpyro's NUTS
        sampling loop, a training loop in ``fori_loop``) stops paying the interpreter there."""
        STATS["resumed"] += 1
        return self(*carried, *captures)

    def __call__(self, *args):
        fast = self._fast
        if fast is None:
            if self._retry is not None:
                self._retry_skipped()
            STATS["interpreted"] += 1
            return self._interpreted(*args)
        spec = self._spec
        n = len(spec.types)
        carries = []
        for p, t in enumerate(spec.types):
            if p in spec.passthrough:  # never written: read the caller's array
                carries.append(np.ascontiguousarray(args[p], dtype=t.dtype).reshape(-1))
            else:  # our own copy, updated in place
                carries.append(np.array(args[p], dtype=t.dtype, order="C").reshape(-1))
        captures = [np.ascontiguousarray(a, dtype=t.dtype).reshape(-1)
                    for a, t in zip(args[n:], spec.capture_types)]
        try:
            fast(*carries, *captures, *spec.constants)
        except Exception as exc:  # noqa: BLE001 - e.g. an argument Numba cannot pass
            cache.report_fallback(f"the native loop {spec.name}", exc,
                                  "running it interpreted from now on")
            self._fast = None
            STATS["interpreted"] += 1
            return self._interpreted(*args)
        STATS["native"] += 1
        return tuple(args[p] if p in spec.passthrough else c.reshape(t.shape)
                     for p, (c, t) in enumerate(zip(carries, spec.types)))
