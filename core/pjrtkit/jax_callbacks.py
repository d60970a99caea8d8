"""JAX lowering rules that turn Python callbacks into ``stablehlo.custom_call @pjrtkit_host_callback``.

JAX lowers ``pure_callback``, ``io_callback``, ``jax.debug.callback``, ``jax.debug.print`` and
checkify's ``check`` only for its own platforms: on cpu/gpu to a custom call that XLA's runtime resolves to a
Python object it received beside the program, which a PJRT plugin never sees. For a pjrtkit
platform these rules instead register the host function in ``pjrtkit.callbacks`` and put its
key in the custom call's ``backend_config``; the backend's rule for that target calls it at run
time on the execute thread. What the host function does is JAX's own code for each primitive
(``*_impl``: arguments placed on JAX's cpu device, results canonicalized as on cpu), so a
callback sees exactly what it sees on XLA's CPU backend. JAX's impls need its cpu platform;
when it is not started, a platform like cpu places the arguments on its own device instead.

Ordered effects (``io_callback(ordered=True)``, ``jax.debug.print(ordered=True)``) keep JAX's
token threading: the effect's token is the custom call's first operand and first result.

Written against jax 0.10.2 (``jax._src.callback``, ``jax._src.debugging``); the names used are
checked by ``tests/jax/test_callbacks.py``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from pjrtkit import callbacks


def _callback_name(primitive, params: Mapping[str, Any]) -> str:
    """What error messages call the callback: the API the user called and their function."""
    if primitive.name == "debug_print":
        return f"jax.debug.print({params['fmt']!r})"
    if primitive.name == "check":
        return "checkify.check"
    function = params.get("callback")
    function = getattr(function, "callback_func", function)  # JAX's flattening wrapper
    label = getattr(function, "__qualname__", None) or type(function).__name__
    api = {"pure_callback": "jax.pure_callback", "io_callback": "jax.experimental.io_callback",
           "debug_callback": "jax.debug.callback",
           "buffer_callback": "jax.experimental.buffer_callback"}.get(primitive.name,
                                                                     primitive.name)
    return f"{api}({label})"


def _device_count(axis_context) -> int:
    """Devices the program being lowered spans (1 for a plain single-device jit)."""
    num_devices = getattr(axis_context, "num_devices", None)
    if num_devices is not None:
        return int(num_devices)
    mesh = getattr(axis_context, "mesh", None)
    return int(mesh.size) if mesh is not None else 1


def _user_function(primitive, params: Mapping[str, Any]) -> Callable[..., Any]:
    """The flat callable behind the primitive: what JAX's impl calls once the arguments are
    placed (jax 0.10.2 internals for debug_print, which formats inside its impl)."""
    if primitive.name != "debug_print":
        return params["callback"]
    from jax._src import debugging

    print_message = functools.partial(
        debugging._format_print_callback, params["fmt"],  # noqa: SLF001 - JAX's own formatting
        dict(params["np_printoptions"]), params["has_placeholders"], params["logging_record"])
    return debugging._make_flat_callback(  # noqa: SLF001 - JAX's own argument merging
        params["in_tree"], print_message, params["static_args"])


def _on_own_device(function: Callable[..., Any], platform: str, device, returns: bool):
    """Run ``function`` with its arguments on the pjrtkit ``device`` (the local CPU of a
    platform like cpu when JAX's cpu platform is not started), as JAX's impl does on cpu."""
    import jax
    from jax._src import mesh as mesh_lib
    from jax._src import sharding_impls

    def call(*arrays):
        target = device if device is not None else jax.local_devices(backend=platform)[0]
        args = jax.device_put(arrays, target)
        # no mesh of the caller's applies inside the callback, as in JAX's own impls
        with (jax.default_device(target),
              sharding_impls._internal_use_concrete_mesh(  # noqa: SLF001 - as JAX's impl
                  mesh_lib.empty_concrete_mesh),
              mesh_lib.use_abstract_mesh(mesh_lib.empty_abstract_mesh)):
            results = function(*args)
        return tuple(np.asarray(r) for r in results) if returns else ()

    return call


# pjrtkit platforms like cpu, in registration order: where an eager jax.debug.callback /
# jax.debug.print places its arguments when JAX's cpu platform is not started.
_LIKE_CPU_PLATFORMS: list[str] = []


def _eager_platform(args) -> str | None:
    """The pjrtkit platform an eager debug callback runs on instead of JAX's cpu: None while
    JAX's cpu is started (JAX's own impl then runs); else the platform of the first argument
    on a pjrtkit platform like cpu, or the default backend's if it is one."""
    from jax._src import xla_bridge

    if not _LIKE_CPU_PLATFORMS or "cpu" in xla_bridge.backends():
        return None
    for arg in args:
        devices = getattr(arg, "devices", None)
        if callable(devices):
            platforms = {d.platform for d in devices()}
            if len(platforms) == 1 and next(iter(platforms)) in _LIKE_CPU_PLATFORMS:
                return next(iter(platforms))
    default = xla_bridge.get_backend().platform
    return default if default in _LIKE_CPU_PLATFORMS else None


def extend_eager_callbacks(platform: str, like_platform: str | None) -> None:
    """``jax.debug.callback`` / ``jax.debug.print`` outside ``jit`` run their callable directly
    (JAX's impls, which place the arguments on JAX's cpu device and raise without it). On a
    platform like cpu with JAX's cpu not started (``JAX_PLATFORMS=pjrtkit_cpu``) they place
    the arguments on the platform's own device instead, as the lowered callbacks do."""
    from jax._src import debugging

    if like_platform != "cpu":
        return
    if platform not in _LIKE_CPU_PLATFORMS:
        _LIKE_CPU_PLATFORMS.append(platform)
    for primitive in (debugging.debug_callback_p, debugging.debug_print_p):
        if getattr(primitive.impl, "pjrtkit_wraps", None) is not None:
            continue

        def impl(*args, _primitive=primitive, _original=primitive.impl, **params):
            own = _eager_platform(args)
            if own is None:
                return _original(*args, **params)
            _on_own_device(_user_function(_primitive, params), own, None, returns=False)(*args)
            return ()

        impl.pjrtkit_wraps = primitive.impl
        primitive.def_impl(impl)


def _host_function(primitive, impl: Callable[..., Any], params: Mapping[str, Any],
                   platform: str, like_platform: str | None, device):
    """Call JAX's implementation of the primitive on NumPy arrays (it places them on JAX's cpu
    device); results as NumPy arrays canonicalized the way JAX's own callback lowering does
    (e.g. f64 -> f32 without x64). Without JAX's cpu platform, a platform like cpu places the
    arguments on its own device instead."""
    from jax._src import dtypes, xla_bridge

    def call(*arrays):
        if primitive.name in _HOST_ONLY:
            results = impl(*arrays, **params) or ()
        elif like_platform == "cpu" and "cpu" not in xla_bridge.backends():
            on_own_device = _on_own_device(_user_function(primitive, params), platform, device,
                                           returns=primitive.name in _RETURNING)
            results = on_own_device(*arrays)
        else:
            results = impl(*arrays, **params) or ()
        return tuple(dtypes.canonicalize_value(np.asarray(r)) for r in results)

    return call


# The callback primitives whose callable returns the custom call's results.
_RETURNING = frozenset({"pure_callback", "io_callback"})

# Primitives whose host function works on NumPy arrays alone (no JAX device placement): checkify's
# ``check`` raises the error its operands encode; ``buffer_callback`` hands its callable the
# host arrays themselves.
_HOST_ONLY = frozenset({"check", "buffer_callback"})


def _single_device(axis_context):
    """The device a single-device program was lowered for, when JAX says (else None)."""
    assignment = getattr(axis_context, "device_assignment", None)
    return assignment[0] if assignment is not None and len(assignment) == 1 else None


def _debug_partial_auto(primitive, axis_context, params: Mapping[str, Any]):
    """For ``jax.debug.callback`` / ``jax.debug.print`` inside a shard_map manual over only some
    mesh axes: what JAX lowers them to on its cpu (``_debug_callback_partial_auto``: a nested
    shard_map over the other axes that runs the callback where their index is 0, so the
    callback lowers again, fully manual). None elsewhere."""
    from jax._src import debugging, sharding_impls

    if primitive.name not in ("debug_callback", "debug_print") or not isinstance(
            axis_context, sharding_impls.SPMDAxisContext):
        return None
    if not set(axis_context.mesh.axis_names) - set(axis_context.manual_axes):
        return None
    if primitive.name == "debug_callback":
        bound = dict(params)
    else:
        effect = debugging.ordered_debug_effect if params["ordered"] else debugging.debug_effect
        bound = {"effect": effect, "partitioned": params["partitioned"],
                 "callback": _user_function(primitive, params)}
    return functools.partial(debugging._debug_callback_partial_auto,  # noqa: SLF001 - JAX's own
                             axis_context, **bound)


def _multi_device_sharding(ctx, params: Mapping[str, Any], *, ordered: bool):
    """Where the callback runs in a program over several devices, as JAX decides for its own
    cpu callbacks (``jax._src.callback._callback_op_sharding``): inside a fully manual
    ``shard_map`` on every device with its own shard; in a sharded ``jit`` once, on the
    device its ``sharding`` names (else the first), with the whole arrays (XLA's partitioner
    gathers the operands there and hands the results to every device). Partially manual
    ``shard_map`` raises NotImplementedError as on JAX's cpu. An ordered callback's token
    gets its own annotation, as JAX gives it."""
    from jax._src import callback as jax_callback
    from jax._src import sharding_impls

    sharding = jax_callback._callback_op_sharding(  # noqa: SLF001 - JAX's own placement rule
        ctx.module_context.axis_context, params.get("sharding"), ctx.avals_out)
    if ordered and isinstance(sharding, sharding_impls.SdyArrayList) and ctx.avals_out:
        first = sharding.shardings[0]
        sharding = sharding_impls.SdyArrayList((
            sharding_impls.SdyArray(mesh_shape=(), dim_shardings=(),
                                    logical_device_ids=first.logical_device_ids),
            *sharding.shardings))
    return sharding


def host_callback_lowering(primitive, impl: Callable[..., Any], *, has_side_effect: bool,
                           platform: str, like_platform: str | None):
    """A JAX lowering rule for ``primitive`` on ``platform`` whose host side is
    ``impl(*arrays, **params)``."""
    from jax._src import effects
    from jax._src.interpreters import mlir

    def rule(ctx, *args, **params):
        partial_auto = _debug_partial_auto(primitive, ctx.module_context.axis_context, params)
        if partial_auto is not None:
            return mlir.lower_fun(partial_auto)(ctx, *args)
        devices = _device_count(ctx.module_context.axis_context)
        name = _callback_name(primitive, params)
        function = _host_function(primitive, impl, params, platform, like_platform,
                                  _single_device(ctx.module_context.axis_context))
        entry = callbacks.register(function, name)
        # JAX keeps keepalives as long as the lowered and compiled program; that keeps the
        # table entry alive exactly as long as a program may call it.
        ctx.module_context.add_keepalive(entry)
        # Declared as a host callback too, so that JAX never writes the program (whose key
        # means nothing in another process) to its persistent compilation cache, and
        # jax.export refuses it as it does on cpu. jaxlib keeps it beside the executable.
        ctx.module_context.add_host_callback(entry.function)
        _, primitive_effects = primitive.abstract_eval(*ctx.avals_in, **params)
        ordered = list(effects.ordered_effects.filter_in(primitive_effects))
        operands = list(args)
        result_types = [mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out]
        if ordered:
            effect, = ordered
            operands.insert(0, ctx.tokens_in.get(effect))
            result_types.insert(0, mlir.token_type())
        if devices == 1:
            target = callbacks.HOST_CALLBACK_TARGET
        elif params.get("partitioned"):
            target = callbacks.PARTITIONED_CALLBACK_TARGET
        else:
            target = callbacks.PARTITIONER_CALLBACK_TARGET
        layouts = {}
        if devices > 1:
            # Row-major layouts, as JAX's FFI callbacks carry them: XLA's partitioner of the
            # partitioned target requires a layout-constrained call (else a CHECK aborts XLA).
            token_ranks = [0] if ordered else []
            layouts = dict(
                operand_layouts=[tuple(reversed(range(r))) for r in
                                 token_ranks + [len(a.shape) for a in ctx.avals_in]],
                result_layouts=[tuple(reversed(range(r))) for r in
                                token_ranks + [len(a.shape) for a in ctx.avals_out]])
        op = mlir.custom_call(target, result_types=result_types,
                              operands=operands, backend_config=entry.key,
                              has_side_effect=(has_side_effect or bool(ordered)
                                               or bool(params.get("has_side_effect"))),
                              **layouts)
        if devices > 1:
            mlir.set_sharding(ctx.module_context, op,
                              _multi_device_sharding(ctx, params, ordered=bool(ordered)))
        results = list(op.results)
        if ordered:
            token = results.pop(0)
            ctx.set_tokens_out(ctx.tokens_in.update_tokens(mlir.TokenSet({effect: token})))
        return results

    return rule


def check_lowering(platform: str, like_platform: str | None) -> Callable:
    """checkify's ``check`` primitive (``checkify.check`` under jit without ``checkify``), as
    JAX lowers it on cpu and gpu: a ``debug_check`` is a no-op; otherwise it is refused at
    lowering unless ``jax_xla_runtime_errors`` is on, when a host callback raises the error
    its operands encode (an error of that execution, naming the check)."""
    from jax._src import checkify, config

    def check_impl(*arrays, err_tree, debug):
        del debug
        return checkify.python_err(err_tree, *arrays)

    callback_rule = host_callback_lowering(checkify.check_p, check_impl, has_side_effect=True,
                                           platform=platform, like_platform=like_platform)

    def rule(ctx, *args, err_tree, debug):
        if debug:
            return []
        if not config.xla_runtime_errors.value:
            raise checkify.functionalization_error
        return callback_rule(ctx, *args, err_tree=err_tree, debug=debug)

    return rule


class HostBuffer:
    """What a ``jax.experimental.buffer_callback`` callable gets for each argument and result on
    a platform like cpu (jaxlib's ``Buffer`` there): a host array, read-only for an argument,
    written in place for a result; NumPy reads it through ``__array__`` or DLPack."""

    __slots__ = ("_array",)

    def __init__(self, array: np.ndarray):
        self._array = array

    shape = property(lambda self: self._array.shape)
    dtype = property(lambda self: self._array.dtype)
    ndim = property(lambda self: self._array.ndim)
    writeable = property(lambda self: bool(self._array.flags.writeable))

    def __array__(self, dtype=None, copy=None):
        converts = dtype is not None and np.dtype(dtype) != self._array.dtype
        if copy is False and converts:
            raise ValueError(f"a {self._array.dtype} buffer cannot be read as {np.dtype(dtype)} "
                             f"without a copy (copy=False)")
        if copy or converts:
            return np.array(self._array, dtype=dtype, copy=True)
        return self._array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    def __repr__(self) -> str:
        return f"HostBuffer({self.dtype}{list(self.shape)}, writeable={self.writeable})"


class HostExecutionContext:
    """The ``ctx`` a buffer callback gets on a platform like cpu: the execute stage, and no
    GPU stream (jaxlib's CPU context raises the same way)."""

    __slots__ = ()

    @property
    def stage(self):
        from jax._src.lib import ffi as ffi_lib

        return ffi_lib.ExecutionStage.EXECUTE

    @property
    def stream(self):
        from jax.errors import JaxRuntimeError

        raise JaxRuntimeError("INVALID_ARGUMENT: XLA FFI GPU context is not available: a "
                              "pjrtkit platform like cpu runs buffer callbacks on host arrays")


def buffer_callback_impl(*arrays, callback, result_avals, in_tree, out_tree,
                         input_output_aliases=(), **_):
    """JAX's ``buffer_callback`` on host arrays: fresh result arrays (an aliased result starts
    as a copy of its argument, which the callable then sees as that argument, read-only, as
    XLA hands one buffer to both), the callable fills them in place and returns nothing."""
    from jax._src import tree_util

    results = [np.zeros(a.shape, a.dtype) for a in result_avals]
    arguments = []
    for array in arrays:
        view = np.asarray(array).view()
        view.flags.writeable = False
        arguments.append(view)
    for i, o in input_output_aliases:
        results[o] = np.array(arrays[i], dtype=result_avals[o].dtype, copy=True)
        arguments[i] = results[o].view()
        arguments[i].flags.writeable = False
    args, kwargs = tree_util.tree_unflatten(in_tree, [HostBuffer(a) for a in arguments])
    outs = tree_util.tree_unflatten(out_tree, [HostBuffer(r) for r in results])
    if callback(HostExecutionContext(), outs, *args, **kwargs) is not None:
        raise ValueError("buffer_callback callback must not return any values.")
    return results


def callback_lowerings(platform: str, like_platform: str | None) -> dict[Any, Callable]:
    """The rules for every callback primitive of this JAX version on ``platform``, keyed by
    primitive."""
    from jax._src import callback as jax_callback
    from jax._src import checkify, debugging

    def rule(primitive, impl, has_side_effect):
        return host_callback_lowering(primitive, impl, has_side_effect=has_side_effect,
                                      platform=platform, like_platform=like_platform)

    rules = {
        jax_callback.pure_callback_p: rule(
            jax_callback.pure_callback_p, jax_callback.pure_callback_impl, False),
        jax_callback.io_callback_p: rule(
            jax_callback.io_callback_p, jax_callback.io_callback_impl, True),
        debugging.debug_callback_p: rule(
            debugging.debug_callback_p, debugging.debug_callback_impl, True),
        debugging.debug_print_p: rule(
            debugging.debug_print_p, debugging.debug_print_impl, True),
        checkify.check_p: check_lowering(platform, like_platform),
    }
    if like_platform == "cpu":
        # On JAX's gpu platforms a buffer callback gets device buffers and a stream; a
        # platform like cpu hands host arrays, as XLA's CPU backend does (tpu: none at all).
        from jax._src import buffer_callback

        rules[buffer_callback.buffer_callback_p] = rule(
            buffer_callback.buffer_callback_p, buffer_callback_impl,
            False)  # its has_side_effect parameter marks the custom call, per call
    return rules
