"""The floating-point state pjrtkit's work runs in: the threads it starts, and compiles.

The rounding mode and subnormal flushing (x86's MXCSR FTZ/DAZ bits, AArch64's FPCR FZ bit)
belong to a thread, and a new thread starts with its creator's. A library built with
-ffast-math, or XLA's CPU backend while it executes (it flushes subnormals), can leave
flushing on in a thread that then starts one of ours. Everything that thread runs would then
give other bits: kernels read subnormal inputs as zero, and even Python's float parser reads
the literal ``5e-324`` of a generated kernel's source as 0.0, and ``repr(5e-324)`` writes it
as ``0.0``.

So every thread pjrtkit starts calls ``reset_thread`` first (``clean_thread`` wraps a thread's
target; a ``concurrent.futures`` pool passes ``initializer=reset_thread``): it gets C's
default environment, round to nearest and subnormals kept. What runs on the caller's thread
through a PJRT call (a compile, an inline execution) gets the same from the C guard of every
entry point (``abi/pjrtkit_fp_state.h``), which gives the caller its state back. Work that runs
on the caller's own thread outside PJRT (a plan called directly) keeps the caller's state;
``default_environment()`` is that scope for Python code (tests).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import logging
import platform
import sys
from collections.abc import Callable, Iterator
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# glibc's fenv_t is 32 bytes on x86-64 (the x87 environment, then MXCSR at byte 28) and
# 8 on AArch64; a larger buffer is harmless for fegetenv.
_FENV_BYTES = 64
_X86_MXCSR_OFFSET = 28
_X86_FLUSH_BITS = 0x8040  # FTZ (bit 15) and DAZ (bit 6)


@functools.cache
def _libm():
    """libm through ctypes with its default environment pointer, or None where unknown."""
    name = ctypes.util.find_library("m")
    if name is None:
        return None
    try:
        libm = ctypes.CDLL(name)
        if sys.platform.startswith("linux"):
            default = ctypes.c_void_p(-1)  # glibc's FE_DFL_ENV, ((const fenv_t *) -1)
        elif sys.platform == "darwin":
            default = ctypes.c_void_p(ctypes.addressof(
                ctypes.c_char.in_dll(libm, "_FE_DFL_ENV")))
        else:
            return None
    except (OSError, ValueError, AttributeError):
        log.debug("pjrtkit: no libm floating-point environment calls", exc_info=True)
        return None
    libm.fesetenv.argtypes = libm.fegetenv.argtypes = [ctypes.c_void_p]
    return libm, default


def reset_thread() -> bool:
    """Gives the calling thread C's default floating-point environment (round to nearest,
    subnormals kept, exceptions masked). False where this platform's libm was not found."""
    found = _libm()
    if found is None:
        return False
    libm, default = found
    return libm.fesetenv(default) == 0


@contextlib.contextmanager
def default_environment() -> Iterator[None]:
    """Runs its block in C's default floating-point environment and gives the calling thread
    its own environment back afterwards (nothing changes where libm was not found)."""
    found = _libm()
    if found is None:
        yield
        return
    libm, default = found
    saved = ctypes.create_string_buffer(_FENV_BYTES)
    if libm.fegetenv(saved) != 0:
        yield
        return
    libm.fesetenv(default)
    try:
        yield
    finally:
        libm.fesetenv(saved)


def flushes_subnormals() -> bool:
    """Whether the calling thread flushes subnormals (reads or writes them as zero)."""
    import numpy as np  # (not at import: discovery imports this module)

    return bool((np.array([5e-324]) * 1.0)[0] == 0.0)


def can_set_flush_subnormals() -> bool:
    """Whether ``set_flush_subnormals`` works here (x86-64 Linux with glibc's libm)."""
    return (_libm() is not None and sys.platform.startswith("linux")
            and platform.machine() in ("x86_64", "AMD64"))


def set_flush_subnormals(flush: bool) -> None:
    """Sets or clears x86's FTZ and DAZ bits on the calling thread (x86-64 Linux only; what a
    -ffast-math library does, for tests of the threads' state)."""
    if not can_set_flush_subnormals():
        raise NotImplementedError("setting subnormal flushing needs x86-64 Linux")
    libm = _libm()[0]
    env = ctypes.create_string_buffer(_FENV_BYTES)
    if libm.fegetenv(env) != 0:
        raise OSError("fegetenv failed")
    word = int.from_bytes(env.raw[_X86_MXCSR_OFFSET:_X86_MXCSR_OFFSET + 4], "little")
    word = word | _X86_FLUSH_BITS if flush else word & ~_X86_FLUSH_BITS
    ctypes.memmove(ctypes.addressof(env) + _X86_MXCSR_OFFSET, word.to_bytes(4, "little"), 4)
    if libm.fesetenv(env) != 0:
        raise OSError("fesetenv failed")


def clean_thread(target: Callable[..., T]) -> Callable[..., T]:
    """``target`` with ``reset_thread()`` first: the target of a thread pjrtkit starts."""
    @functools.wraps(target)
    def run(*args, **kwargs):
        reset_thread()
        return target(*args, **kwargs)
    return run
