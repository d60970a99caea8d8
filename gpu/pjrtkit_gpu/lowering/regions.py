"""A scalar region (a sort comparator, a reduce body) as lines of Triton code.

The region's block arguments are given as expressions already in their compute types
(``dtypes.compute_language_type``); its ops become assignments through ``elementwise_table``
(so a comparator or body computes exactly what the same ops would as a fused chain; groups
the fusion pass made inside the region are inlined), its
scalar constants become literals, and its return's operands are the result expressions. The
lines are inlined into a generated kernel, where the arguments may be tiles of any broadcast
shape. An op or dtype without an expression raises ``NoKernel`` with ``exc.op`` set.
"""
from __future__ import annotations

import math

import numpy as np

from pjrtkit_gpu import dtypes as D
from pjrtkit_gpu.elementwise_table import NoKernel, statements
from pjrtkit_gpu.fusion import BROADCAST
from pjrtkit_gpu.lowering.elementwise import FUSED, load_template


def _literal(op) -> str:
    value = np.asarray(op.attributes["value"])
    dtype = op.results[0].type.dtype
    if value.size != 1 or not D.is_supported(dtype):
        raise NoKernel(f"constant {value.shape} of {dtype.name} in a region")
    scalar = value.reshape(()).item()
    if dtype == D.BOOL:
        return "True" if scalar else "False"
    if D.is_float(dtype):
        scalar = float(scalar)
        if math.isnan(scalar):
            return "float('nan')"
        if math.isinf(scalar):
            return "float('inf')" if scalar > 0 else "float('-inf')"
        return repr(scalar)
    return str(int(scalar))


def captured_scalars(values) -> list[str]:
    """For the values a region reads from outside (``ctx.captures(op)``: constants the loader
    hoisted out of the comparator, ...): how a kernel loads each from its pointer parameter
    ``cap<k>`` into its compute type. ``NoKernel`` unless each is a scalar of a supported
    dtype."""
    loads = []
    for k, value in enumerate(values):
        t = value.type
        if getattr(t, "rank", None) != 0 or not D.is_supported(t.dtype):
            raise NoKernel(f"a region reading {t} from outside it")
        loads.append(load_template(t.dtype).format(v=f"tl.load(cap{k})"))
    return loads


def region_lines(region, arguments: list[str], prefix: str, captures=()
                 ) -> tuple[list[str], list[str]]:
    """``(lines, results)``: assignments to ``{prefix}<k>`` computing ``region`` from the
    expressions ``arguments`` (one per block argument) and, for the values it reads from
    outside, ``captures`` (``{value id: expression}``), and the returned expressions."""
    block = region.entry
    if len(block.arguments) != len(arguments):
        raise NoKernel(f"region of {len(block.arguments)} arguments given {len(arguments)}")
    names = dict(captures)
    names.update((v.id, a) for v, a in zip(block.arguments, arguments))
    lines = []
    for k, op in enumerate(block.ops[:-1]):
        if op.name == FUSED and all(v.id in names for v in op.operands):
            # the fusion pass also groups the ops of regions: inline the group
            inner, results = region_lines(op.regions[0], [names[v.id] for v in op.operands],
                                          f"{prefix}{k}_", names)
            lines += inner
            names.update((v.id, r) for v, r in zip(op.results, results))
            continue
        if op.name == BROADCAST and op.operands[0].type.size == 1 and op.operands[0].id in names:
            names[op.results[0].id] = names[op.operands[0].id]  # one element: the scalar itself
            continue
        if len(op.results) != 1:
            exc = NoKernel(f"{op.name} with {len(op.results)} results in a region")
            exc.op = op
            raise exc
        try:
            if op.name == "stablehlo.constant":
                lines.append(f"{prefix}{k} = {_literal(op)}")
            else:
                lines += statements(op, [names[v.id] for v in op.operands], f"{prefix}{k}")
        except NoKernel as exc:
            exc.op = op
            raise
        except KeyError:
            exc = NoKernel(f"{op.name} reads a value from outside its region")
            exc.op = op
            raise exc from None
        names[op.results[0].id] = f"{prefix}{k}"
    return lines, [names[v.id] for v in block.ops[-1].operands]
