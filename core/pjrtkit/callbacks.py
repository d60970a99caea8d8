"""Host callbacks: the table of Python callables a program calls, and the kernel that calls one.

A JAX program that calls back into Python (``jax.pure_callback``, ``io_callback``,
``jax.debug.callback``, ``jax.debug.print``) reaches a pjrtkit backend as
``stablehlo.custom_call @pjrtkit_host_callback`` whose ``backend_config`` is a key into this
table (``pjrtkit.jax_callbacks`` emits it while JAX lowers the program). The custom call's
operands and results are the callable's arrays plus, for ordered effects, one leading token.

Lifetime: the table holds its entries weakly. JAX keeps the entry alive for as long as the
lowered or compiled program lives (it is one of the lowering's keepalives), and every kernel
made from it holds the entry too, so an entry disappears exactly when nothing can call it any
more. Keys carry a per-process token, so a program serialized in one process and loaded in
another is refused with a clear error instead of calling some other callable.

This module is free of JAX: any plugin gets the rule (``host_callback_rule``) and a device
plugin whose payloads are not host arrays makes its own with ``make_host_callback_rule``.
"""
from __future__ import annotations

import itertools
import secrets
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from pjrtkit.errors import FailedPrecondition, Internal, InvalidArgument, PjrtError
from pjrtkit.stablehlo.ir import TokenType

HOST_CALLBACK_TARGET = "pjrtkit_host_callback"
"""``call_target_name`` of the custom call that runs a registered host callable."""

PARTITIONER_CALLBACK_TARGET = "xla_python_cpu_callback"
"""The name a host callback carries in a program over several devices until XLA's SPMD
partitioner has run (``pjrtkit.stablehlo.partition`` renames it back to HOST_CALLBACK_TARGET):
the partitioner keeps a side-effecting custom call's placement (the sharding JAX gives
callbacks) only for the targets it knows as Python callbacks, and refuses the program
otherwise ("Side-effect HLO must have sharding"). The key in ``backend_config`` is unchanged."""

PARTITIONED_CALLBACK_TARGET = "xla_ffi_partitioned_python_cpu_callback"
"""The same for a callback JAX asks to run on each device with its local shards
(``jax.debug.print(..., partitioned=True)``, ``jax.debug.callback(..., partitioned=True)``) in a
sharded ``jit``: XLA's partitioner keeps this target's operands sharded and runs it on every
device, as for JAX's own cpu callbacks of that name; renamed back to HOST_CALLBACK_TARGET too."""

# Keys made in this process start with this; a key from another process can never match.
_PROCESS_TOKEN = secrets.token_hex(6)
_counter = itertools.count()
_lock = threading.Lock()
_table: weakref.WeakValueDictionary[str, HostCallback] = weakref.WeakValueDictionary()

# The run-time value of a token operand or result for hosts that store arrays: empty, read-only.
HOST_TOKEN = np.zeros((0,), dtype=np.bool_)
HOST_TOKEN.flags.writeable = False


class HostCallback:
    """One registered callable. ``function(*arrays)`` returns a sequence of arrays, one per
    non-token result of the custom call; ``name`` names it in error messages."""

    __slots__ = ("key", "function", "name", "__weakref__")

    def __init__(self, key: str, function: Callable[..., Any], name: str):
        self.key = key
        self.function = function
        self.name = name

    def __repr__(self) -> str:
        return f"HostCallback({self.key!r}, {self.name})"


def register(function: Callable[..., Any], name: str) -> HostCallback:
    """Put ``function`` in the table under a fresh key. The caller keeps the returned entry
    alive for as long as a program may call it (the table alone does not)."""
    with _lock:
        key = f"{_PROCESS_TOKEN}:{next(_counter)}"
        entry = HostCallback(key, function, name)
        _table[key] = entry
    return entry


def lookup(key: str) -> HostCallback:
    """The entry for ``key``; FailedPrecondition when it is gone or was made elsewhere."""
    with _lock:
        entry = _table.get(key)
    if entry is not None:
        return entry
    if not key.startswith(f"{_PROCESS_TOKEN}:"):
        raise FailedPrecondition(
            f"host callback {key!r} was registered by another process (the program was "
            f"serialized with a Python callback in it); Python callables cannot travel with a "
            f"serialized program: trace and compile the function again in this process")
    raise FailedPrecondition(
        f"host callback {key!r} no longer exists: the JAX program that registered it was "
        f"garbage-collected; trace and compile the function again")


def live_count() -> int:
    """How many entries are alive (for tests of the lifetime)."""
    with _lock:
        return len(_table)


class HostCallbackError(Internal):
    """The Python callable raised: the error of that one execution (INTERNAL, as XLA's CPU
    backend reports it)."""


def make_host_callback_rule(to_host: Callable[[Any], np.ndarray] = np.asarray,
                            from_host: Callable[[np.ndarray], Any] = lambda a: a,
                            token: Any = HOST_TOKEN, *,
                            transfers: Callable[[Any], tuple] | None = None):
    """A lowering rule for ``custom_call_rule(HOST_CALLBACK_TARGET)``.

    ``to_host`` turns an operand payload into a NumPy array before the call and ``from_host``
    turns each returned NumPy array into a result payload; a host-memory plugin keeps the
    defaults, a device plugin passes its copies. ``token`` is the payload of a token result.
    A device plugin whose copies depend on the compile (the device the program is compiled for,
    found in ``ctx.payloads``) passes ``transfers(ctx) -> (to_host, from_host, token)``
    instead, asked once per callback op at compile time.
    """

    def host_callback(op, ctx):
        if transfers is not None:
            op_to_host, op_from_host, op_token = transfers(ctx)
        else:
            op_to_host, op_from_host, op_token = to_host, from_host, token
        key = op.attributes.get("backend_config", "")
        if not isinstance(key, str) or not key:
            raise InvalidArgument(f"custom_call @{HOST_CALLBACK_TARGET} without a callback key in "
                                  f"backend_config (only pjrtkit's own callback lowering emits it)")
        entry = lookup(key)
        is_token = tuple(isinstance(v.type, TokenType) for v in op.operands)
        results = op.results
        expected = tuple(None if isinstance(v.type, TokenType) else
                         (tuple(v.type.shape), np.dtype(v.type.dtype)) for v in results)
        return _host_callback_kernel(entry, is_token, expected, op_to_host, op_from_host,
                                     op_token)

    return host_callback


def _host_callback_kernel(entry, is_token, expected, to_host, from_host, token):
    num_arrays = sum(e is not None for e in expected)

    def kernel(*operands):
        arrays = [to_host(x) for x, tok in zip(operands, is_token) if not tok]
        try:
            returned = entry.function(*arrays)
        except PjrtError:
            raise
        except BaseException as exc:  # noqa: BLE001 - sys.exit() in a callback must not
            # escape the execution: on the worker thread its events would never complete.
            raise HostCallbackError(
                f"host callback {entry.name} raised {type(exc).__name__}: {exc}") from exc
        returned = list(returned)
        if len(returned) != num_arrays:
            raise InvalidArgument(f"host callback {entry.name} returned {len(returned)} "
                                  f"value(s); the program expects {num_arrays}")
        values = iter(returned)
        outputs = []
        for i, shape_dtype in enumerate(expected):
            if shape_dtype is None:
                outputs.append(token)
                continue
            value = np.asarray(next(values))
            shape, dtype = shape_dtype
            if value.shape != shape or value.dtype != dtype:
                raise InvalidArgument(
                    f"host callback {entry.name}: result {i} is {value.dtype}{list(value.shape)}"
                    f"; the program expects {dtype}{list(shape)}")
            # An owned copy: the callable may keep (and later change) the array it returned.
            outputs.append(from_host(np.array(value, copy=True, order="C")))
        return tuple(outputs)

    return kernel


host_callback_rule = make_host_callback_rule()
"""The rule for host-memory plugins (payloads are NumPy arrays)."""
