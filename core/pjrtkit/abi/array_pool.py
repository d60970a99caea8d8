"""The array pool: NumPy's data allocator on the threads that run kernels (the C side:
``pjrtkit_array_pool.h``).

A kernel makes its outputs and temporaries as NumPy arrays. glibc serves each large block
(from 128 KiB, and its threshold only ever rises to the sizes it has freed) with a fresh
``mmap`` and gives it back on free, so every page of every output is faulted in and zeroed
again on every call. A training step is the same arrays call after call: on the 4-device MLP
step (benchmarks, ``mlp_train_step_dp4``, 2 cores) that took a third of the step (12.7 ms a
step with glibc's defaults, 8.0 ms with its thresholds raised by hand, 8.4 ms with the pool).
So the threads that run kernels (``pjrtkit.kernel_threads``) allocate NumPy data from a pool
that keeps freed blocks of 64 KiB and more, by size class, up to ``PJRTKIT_ARRAY_POOL_BYTES``
(default 256 MiB; ``0`` turns the pool off), and gives them to the next array of that class.
A freed block that would pass the limit makes room by giving back the blocks kept longest: a
scan RNN run after two flax training steps found the pool full of their blocks and faulted in
its 32 MiB outputs on every call (100-115 ms a call against 86-88 ms; XLA 88 ms).

Only arrays made on those threads come from the pool (NumPy's handler is a per-context
setting, NEP 49); an array keeps the handler that made it, so freeing it anywhere returns it
here. Blocks kept free are not counted by any memory's ledger (they hold no buffer); an
allocation that finds no memory gives every kept block back and tries again.
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading

from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.capsules import capsule_pointer, new_capsule
from pjrtkit.errors import InvalidArgument
from pjrtkit.kernel_threads import on_kernel_threads

log = logging.getLogger(__name__)

VARIABLE = "PJRTKIT_ARRAY_POOL_BYTES"
DEFAULT_LIMIT_BYTES = 256 << 20
# The index of PyDataMem_SetHandler in NumPy's C API table (_ARRAY_API), NumPy >= 1.22.
_SET_HANDLER_INDEX = 304

# The capsule keeps a pointer to its name (never copied): alive as long as the process.
_CAPSULE_NAME = ctypes.create_string_buffer(b"mem_handler")

_lock = threading.Lock()
_capsule = None  # the "mem_handler" capsule NumPy keeps a reference to in every pooled array
_set_handler = None


def limit_from_environment() -> int:
    """The pool's byte limit: ``PJRTKIT_ARRAY_POOL_BYTES`` (a size, ``0`` for no pool)."""
    from pjrtkit.runtime.memory_limits import parse_size  # the one size syntax

    raw = os.environ.get(VARIABLE, "").strip()
    if not raw:
        return DEFAULT_LIMIT_BYTES
    if raw == "0":
        return 0
    try:
        return parse_size(raw, VARIABLE)
    except InvalidArgument as exc:
        log.warning("%s; using the default, %d MiB", exc, DEFAULT_LIMIT_BYTES >> 20)
        return DEFAULT_LIMIT_BYTES


def _numpy_set_handler():
    """NumPy's ``PyDataMem_SetHandler`` (a function of the calling thread's context)."""
    import numpy as np

    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # NumPy 1.x
        from numpy.core import _multiarray_umath as umath
    if np.lib.NumpyVersion(np.__version__) < "1.22.0":
        return None  # no data-allocator handlers before NumPy 1.22 (NEP 49)
    # NumPy's C API table: what import_array() reads in a C extension
    api = umath._ARRAY_API  # noqa: SLF001
    table = ctypes.cast(capsule_pointer(api), ctypes.POINTER(ctypes.c_void_p))
    return ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(table[_SET_HANDLER_INDEX])


def install() -> bool:
    """Make the pool the allocator of every kernel thread started from now on (idempotent;
    called when a client is created through the C API). False when the pool is off."""
    global _capsule, _set_handler
    limit = limit_from_environment()
    with _lock:
        if _capsule is None:
            if limit == 0:
                return False
            set_handler = _numpy_set_handler()
            if set_handler is None:
                return False
            address = int(ffi.cast("uintptr_t", lib.pjrtkit_array_pool_handler()))
            _capsule = new_capsule(address, _CAPSULE_NAME)
            _set_handler = set_handler
        lib.pjrtkit_array_pool_set_limit(limit)
    on_kernel_threads(use_on_this_thread)
    return limit > 0


def use_on_this_thread() -> None:
    """NumPy allocates the calling thread's arrays from the pool from now on."""
    if _capsule is not None:
        _set_handler(_capsule)


def stats() -> dict[str, int]:
    """The pool's counts: its limit, the bytes and blocks it keeps, the allocations it served,
    those of its sizes that went to malloc, and the kept blocks it gave back to make room for
    more recently freed ones."""
    counts = ffi.new("int64_t[6]")
    lib.pjrtkit_array_pool_read(counts)
    return {"limit_bytes": int(counts[0]), "kept_bytes": int(counts[1]),
            "kept_blocks": int(counts[2]), "reused": int(counts[3]), "fresh": int(counts[4]),
            "evicted": int(counts[5])}


def release() -> None:
    """Give every kept block back to the system (what an allocation that finds no memory
    does by itself)."""
    lib.pjrtkit_array_pool_release()
