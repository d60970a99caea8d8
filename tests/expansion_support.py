"""Helpers of the expansion tests (a module of its own, as conftest names are ambiguous when the
whole repository's tests are collected together): real JAX programs, expanded for a declared
primitive set and run with the NumPy reference rules, next to XLA's CPU backend."""
from __future__ import annotations

import itertools
import zlib

import jax
import numpy as np
import pytest

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


def _param_id(value, name: str, index: int) -> str:
    """The id pytest's parametrize gives ``value``, the ``index``-th of argument ``name``."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return str(value)
    return getattr(value, "__name__", f"{name}{index}")


def diagonal_sweep(names: str, *axes):
    """``pytest.mark.parametrize(names, ...)`` over every combination of ``axes``, the ids those
    of stacked ``parametrize`` decorators (the first axis first). The combinations on the sweep's
    diagonal (the k-th value of each axis, k modulo its length, for k up to the longest axis:
    every value of every axis at least once) run in ``make test``; the others are marked
    ``long`` (``make test-long``, which CI runs)."""
    argnames = [n.strip() for n in names.split(",")]
    diagonal = {tuple(k % len(axis) for axis in axes) for k in range(max(map(len, axes)))}
    params = []
    for indexes in itertools.product(*(range(len(axis)) for axis in axes)):
        values = [axis[i] for axis, i in zip(axes, indexes)]
        ident = "-".join(_param_id(v, n, i) for v, n, i in zip(values, argnames, indexes))
        marks = () if indexes in diagonal else (pytest.mark.long,)
        params.append(pytest.param(*values, id=ident, marks=marks))
    return pytest.mark.parametrize(names, params)
