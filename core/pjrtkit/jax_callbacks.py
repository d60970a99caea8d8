"""JAX lowering rules that turn Python callbacks into ``stablehlo.custom_call @pjrtkit_host_callback``.

JAX lowers ``pure_callback``, ``io_callback``, ``jax.debug.callback`` and ``jax.debug.print``
only for its own platforms: on cpu/gpu to a custom call that XLA's runtime resolves to a
Python object it received beside the program, which a PJRT plugin never sees. For a pjrtkit
platform these rules instead register the host function in ``pjrtkit.callbacks`` and put its
key in the custom call's ``backend_config``; the backend's rule for that target calls it at run
time on the execute thread. What the host function does is JAX's own code for each primitive
(``*_impl``: arguments placed on JAX's cpu device, results canonicalized as on cpu), so a
callback sees exactly what it sees on XLA's CPU backend.

Ordered effects (``io_callback(ordered=True)``, ``jax.debug.print(ordered=True)``) keep JAX's
token threading: the effect's token is the custom call's first operand and first result.

Written against jax 0.10.2 (``jax._src.callback``, ``jax._src.debugging``); the names used are
checked by ``tests/jax/test_callbacks.py``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from pjrtkit import callbacks


def _callback_name(primitive, params: Mapping[str, Any]) -> str:
    """What error messages call the callback: the API the user called and their function."""
    if primitive.name == "debug_print":
        return f"jax.debug.print({params['fmt']!r})"
    function = params.get("callback")
    function = getattr(function, "callback_func", function)  # JAX's flattening wrapper
    label = getattr(function, "__qualname__", None) or type(function).__name__
    api = {"pure_callback": "jax.pure_callback", "io_callback": "jax.experimental.io_callback",
           "debug_callback": "jax.debug.callback"}.get(primitive.name, primitive.name)
    return f"{api}({label})"


def _device_count(axis_context) -> int:
    """Devices the program being lowered spans (1 for a plain single-device jit)."""
    num_devices = getattr(axis_context, "num_devices", None)
    if num_devices is not None:
        return int(num_devices)
    mesh = getattr(axis_context, "mesh", None)
    return int(mesh.size) if mesh is not None else 1


def _host_function(impl: Callable[..., Any], params: Mapping[str, Any]):
    """Call JAX's implementation of the primitive on NumPy arrays; results as NumPy arrays
    canonicalized the way JAX's own callback lowering does (e.g. f64 -> f32 without x64)."""
    from jax._src import dtypes

    def call(*arrays):
        results = impl(*arrays, **params) or ()
        return tuple(dtypes.canonicalize_value(np.asarray(r)) for r in results)

    return call


def host_callback_lowering(primitive, impl: Callable[..., Any], *, has_side_effect: bool):
    """A JAX lowering rule for ``primitive`` whose host side is ``impl(*arrays, **params)``."""
    from jax._src import effects
    from jax._src.interpreters import mlir

    def rule(ctx, *args, **params):
        devices = _device_count(ctx.module_context.axis_context)
        if devices > 1:
            raise NotImplementedError(
                f"{primitive.name} in a program over {devices} devices is not supported on "
                f"{', '.join(ctx.module_context.platforms)} yet: host callbacks run only in "
                f"single-device programs")
        name = _callback_name(primitive, params)
        entry = callbacks.register(_host_function(impl, params), name)
        # JAX keeps keepalives as long as the lowered and compiled program; that keeps the
        # table entry alive exactly as long as a program may call it.
        ctx.module_context.add_keepalive(entry)
        _, primitive_effects = primitive.abstract_eval(*ctx.avals_in, **params)
        ordered = list(effects.ordered_effects.filter_in(primitive_effects))
        operands = list(args)
        result_types = [mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out]
        if ordered:
            effect, = ordered
            operands.insert(0, ctx.tokens_in.get(effect))
            result_types.insert(0, mlir.token_type())
        op = mlir.custom_call(callbacks.HOST_CALLBACK_TARGET, result_types=result_types,
                              operands=operands, backend_config=entry.key,
                              has_side_effect=has_side_effect or bool(ordered))
        results = list(op.results)
        if ordered:
            token = results.pop(0)
            ctx.set_tokens_out(ctx.tokens_in.update_tokens(mlir.TokenSet({effect: token})))
        return results

    return rule


def callback_lowerings() -> dict[Any, Callable[..., Any]]:
    """The rules for every callback primitive of this JAX version, keyed by primitive."""
    from jax._src import callback as jax_callback
    from jax._src import debugging

    return {
        jax_callback.pure_callback_p: host_callback_lowering(
            jax_callback.pure_callback_p, jax_callback.pure_callback_impl,
            has_side_effect=False),
        jax_callback.io_callback_p: host_callback_lowering(
            jax_callback.io_callback_p, jax_callback.io_callback_impl, has_side_effect=True),
        debugging.debug_callback_p: host_callback_lowering(
            debugging.debug_callback_p, debugging.debug_callback_impl, has_side_effect=True),
        debugging.debug_print_p: host_callback_lowering(
            debugging.debug_print_p, debugging.debug_print_impl, has_side_effect=True),
    }
