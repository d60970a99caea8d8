"""How many threads BLAS may use while the cpu backend runs a program.

OpenBLAS's worker threads spin after each multi-threaded call. On a small machine, next to
JAX's own threads, XLA's thread pool and our executor, that spinning starves everyone else:
the MLP example's step went from 12 ms to 140 ms with two BLAS threads instead of one. So a
program runs with single-threaded BLAS, and only contractions big enough to gain from more
cores (``WIDE_FLOPS``) widen it for the duration of that one call. The user's own setting is
restored after every execution: the library is shared with the user's NumPy code.
"""
from __future__ import annotations

import contextlib
import os
import threading

# A contraction of at least this many flops runs with all BLAS threads: about 10 ms of work on
# one core, enough to pay for the spinning that follows (50e6 measured 9x slower MLP steps).
WIDE_FLOPS = 1e9

_lock = threading.Lock()
_controllers = None


def _blas():
    global _controllers
    if _controllers is None:
        with _lock:
            if _controllers is None:
                try:
                    from threadpoolctl import ThreadpoolController
                    found = [c for c in ThreadpoolController().lib_controllers
                             if c.user_api == "blas"]
                except Exception:  # no threadpoolctl or an unknown BLAS: leave BLAS alone
                    found = []
                _controllers = [(c, c.num_threads) for c in found]
    return _controllers


def _set(counts) -> None:
    for (controller, _), count in zip(_blas(), counts):
        controller.set_num_threads(count)


@contextlib.contextmanager
def single_threaded():
    """BLAS single-threaded for the duration of one execution; then the user's setting."""
    controllers = _blas()
    if not controllers:
        yield
        return
    _set([1] * len(controllers))
    try:
        yield
    finally:
        _set([default for _, default in controllers])


def all_threads(fn, *args):
    """Call ``fn`` with every BLAS thread the user allows (for big contractions)."""
    controllers = _blas()
    if not controllers:
        return fn(*args)
    _set([default for _, default in controllers])
    try:
        return fn(*args)
    finally:
        _set([1] * len(controllers))


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
