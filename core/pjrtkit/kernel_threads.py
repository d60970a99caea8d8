"""What a thread pjrtkit starts to run kernels does first (the executor's worker, the threads of
a launch over several devices): C's default floating-point environment (``fp_state``) and every
setup another layer registered for such threads (the abi layer's array pool,
``pjrtkit.abi.array_pool``: NumPy's data allocator on these threads only).

Threads that run no kernels (starting a backend, bounded calls) use ``fp_state.clean_thread``.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TypeVar

from pjrtkit.fp_state import reset_thread

log = logging.getLogger(__name__)
T = TypeVar("T")

_setups: list[Callable[[], None]] = []


def on_kernel_threads(setup: Callable[[], None]) -> None:
    """Run ``setup()`` at the start of every kernel thread started from now on (once per
    ``setup``, however often it is registered)."""
    if setup not in _setups:
        _setups.append(setup)


def kernel_thread_start() -> None:
    """The first thing a kernel thread does (a ``concurrent.futures`` pool's ``initializer``).
    A setup that raises is logged and skipped: the thread still runs, as it would without."""
    reset_thread()
    for setup in list(_setups):
        try:
            setup()
        except Exception:  # noqa: BLE001 - a setup is an optimisation, never a reason to fail
            log.warning("pjrtkit: kernel thread setup %r failed", setup, exc_info=True)


def kernel_thread(target: Callable[..., T]) -> Callable[..., T]:
    """``target`` with ``kernel_thread_start()`` first: the target of a kernel thread."""
    @functools.wraps(target)
    def run(*args, **kwargs):
        kernel_thread_start()
        return target(*args, **kwargs)
    return run
