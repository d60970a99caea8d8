"""Real StableHLO from real JAX programs, for testing lowering rules without a PJRT client.

``lower_program(fn, *args)`` lowers ``fn`` with JAX exactly as jit does, serializes it to a
StableHLO portable artifact (what jaxlib hands a plugin) and loads it into the IR.
``run_with_registry`` builds a plan with a backend's registry and runs it on NumPy inputs;
``run_on_xla_cpu`` runs the same function on XLA's own CPU backend for the reference.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pjrtkit.lowering.plan import build_plan
from pjrtkit.lowering.registry import LoweringRegistry
from pjrtkit.stablehlo.ir import Program
from pjrtkit.stablehlo.loader import load_program


def portable_artifact(fn: Callable, *args, static_argnums=(), platform: str | None = None) -> bytes:
    """The bytes jaxlib hands a plugin: jaxlib's own serializer, which also legalizes CHLO
    ops (erf, asinh, ...) to StableHLO as it does for real PJRT plugins.

    ``platform`` lowers with that platform's JAX lowering rules (``"pjrtkit_cpu"``: the rules
    its plugin contributes) instead of the default backend's."""
    import jax

    from pjrtkit import jax_compat

    # keep_unused: the plan is called with every argument, as run_with_registry passes them.
    jitted = jax.jit(fn, static_argnums=static_argnums, keep_unused=True)
    if platform is None:
        lowered = jitted.lower(*args)
    else:
        lowered = jitted.trace(*args).lower(lowering_platforms=(platform,))
    return jax_compat.serialize_portable_artifact(lowered.as_text())


def lower_program(fn: Callable, *args, static_argnums=(), platform: str | None = None) -> Program:
    return load_program(portable_artifact(fn, *args, static_argnums=static_argnums,
                                          platform=platform))


def run_with_registry(fn: Callable, args: Sequence, registry: LoweringRegistry,
                      static_argnums=()) -> tuple[np.ndarray, ...]:
    """Lower ``fn`` on ``args``, plan it with ``registry`` and run it; flat tuple of outputs."""
    import jax

    program = lower_program(fn, *args, static_argnums=static_argnums)
    plan = build_plan(program, registry)
    dyn = [a for i, a in enumerate(args) if i not in static_argnums]
    flat = [np.asarray(x) for x in jax.tree_util.tree_leaves(dyn)]
    with np.errstate(all="ignore"):  # as executables run plans: XLA semantics, no warnings
        return tuple(np.asarray(r) for r in plan(*flat))


def run_on_xla_cpu(fn: Callable, args: Sequence, static_argnums=()) -> tuple[np.ndarray, ...]:
    import jax

    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        out = jax.jit(fn, static_argnums=static_argnums)(*args)
    return tuple(np.asarray(x) for x in jax.tree_util.tree_leaves(out))
