"""Helpers for pjrtkit-gpu's tests (a module of its own: ``conftest`` is ambiguous when the
whole repository's tests are collected together): real JAX programs lowered to StableHLO,
fused and planned with the GPU lowering, run by the emulated driver (Triton's interpreter
running the very kernels a GPU runs).

The emulated driver makes this pytest process interpret Triton kernels (``triton_setup``);
tests that compile for GPU targets run in a child process.
"""
from __future__ import annotations

import zlib

import jax
import numpy as np

from pjrtkit.expansions import expand
from pjrtkit.lowering.plan import build_plan
from pjrtkit.testing.programs import lower_program


def emulated_driver():
    from pjrtkit_gpu.drivers import emulated_driver

    return emulated_driver()


def gpu_plan(fn, *args, static_argnums=()):
    """The emulated driver and the plan of ``fn`` lowered on ``args`` by the GPU lowering."""
    driver = emulated_driver()  # first: it makes Triton interpret
    from pjrtkit_gpu.fusion import fuse_elementwise
    from pjrtkit_gpu.lowering import PRIMITIVES, registry_for

    # As the core does before the plugin compiles: what the rules lack is expanded.
    program = expand(lower_program(fn, *args, static_argnums=static_argnums), PRIMITIVES)
    program = fuse_elementwise(program)
    return driver, build_plan(program, registry_for(driver, 0, "pjrtkit_cuda"))


def run_on_gpu(fn, *args, static_argnums=()):
    driver, plan = gpu_plan(fn, *args, static_argnums=static_argnums)
    dynamic = [a for i, a in enumerate(args) if i not in static_argnums]
    # As jit does: int64/float64 become 32-bit unless x64 is on.
    flat = [np.asarray(x, dtype=jax.dtypes.canonicalize_dtype(np.asarray(x).dtype))
            for x in jax.tree_util.tree_leaves(dynamic)]
    payloads = [driver.from_host(0, x) for x in flat]
    with np.errstate(all="ignore"):
        outputs = plan(*payloads)
    return tuple(driver.to_host(p) for p in outputs)


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def sample(name, shape, dtype):
    """Seeded test data: small integers, bools, or normal floats (scale 3) of ``dtype``."""
    rng = rng_for(name)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True,
                            dtype=dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)
