"""Helpers of the expansion tests (a module of its own, as conftest names are ambiguous when the
whole repository's tests are collected together): real JAX programs, expanded for a declared
primitive set and run with the NumPy reference rules, next to XLA's CPU backend."""
from __future__ import annotations

import zlib

import jax
import numpy as np

from pjrtkit import expansions
from pjrtkit.lowering.plan import build_plan
from pjrtkit.reference import REFERENCE
from pjrtkit.semantics import dtypes as RD
from pjrtkit.testing.programs import lower_program
from pjrtkit.types import PrimitiveSet


def storage_view(op, ctx):
    """``stablehlo.bitcast_convert`` as the expansions use it at a program's boundary: the stored
    bytes read as another type (pjrtkit stores sub-byte types one per byte, as ml_dtypes does)."""
    t = op.results[0].type
    return lambda x: (np.ascontiguousarray(x).view(t.dtype).reshape(t.shape),)


# The reference rules as a backend that stores every type and computes on what it declares.
RULES = REFERENCE.merged({"stablehlo.bitcast_convert": storage_view})


def primitives(lacking=(), ops=None) -> PrimitiveSet:
    """The reference's primitive set without the dtypes named in ``lacking``."""
    return PrimitiveSet(ops=RULES.op_names if ops is None else ops,
                        dtypes={d.name for d in RD.ALL} - {np.dtype(d).name for d in lacking},
                        custom_call_targets=RULES.custom_call_targets)


def run_expanded(fn, args, prims, platform=None):
    """(expanded program, outputs) of ``fn`` on ``args`` through the expansions for ``prims``
    (lowered for ``platform``: a name nothing registers gives JAX's generic lowering)."""
    program = expansions.expand(lower_program(fn, *args, platform=platform), prims)
    flat = [np.asarray(a) for a in jax.tree_util.tree_leaves(args)]
    with np.errstate(all="ignore"):
        return program, [np.asarray(r) for r in build_plan(program, RULES)(*flat)]


def replace_ops(program, name, expansion):
    """``program`` with each ``name`` op, at any depth, replaced in place by ``expansion``'s
    ops (``expansion(op, program)``, as a backend's rule would call it)."""
    def rewrite(region):
        for block in region.blocks:
            ops = []
            for op in block.ops:
                for inner in op.regions:
                    rewrite(inner)
                ops.extend(expansion(op, program) if op.name == name else [op])
            block.ops[:] = ops

    for function in program.functions.values():
        rewrite(function.body)
    return program


def seeded_normal(name: str, shape, dtype) -> np.ndarray:
    """Normal samples of ``dtype`` (complex: normal real and imaginary parts) seeded from
    ``name``, so every test's data is reproducible."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = rng.normal(size=shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.normal(size=shape)
    return x.astype(dtype)
