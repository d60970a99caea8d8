"""A C interpreter of elementwise programs over host memory: kernels with nothing to compile.

The semantics' third renderer (after the NumPy one, ``pjrtkit.reference.elementwise_numpy``,
and the cpu plugin's Numba one): ``render`` turns a block of elementwise ops into a program,
an int64 array that the C function at ``ADDRESS`` runs chunk by chunk, with the calling
convention of ``pjrtkit.types.NativeKernel`` (the program's address is the kernel's
``context``). Its loops are compiled when pjrtkit is installed (``_build.py``, from the table in
``spellings``), so a plugin whose buffers are host memory can hand a small program to the
core's C execute path at its first execution instead of after a compile: an eager loop of
single jnp ops, or ``jit(x * 2 + 1)``, runs without Python from its first calls.

``KernelCell`` is a kernel whose code can be replaced while C calls it: a plugin hands the VM's
program over at once and the compiled loop later, when its compile lands.

``ADDRESS`` is None when the compiled module is missing (a source tree that was never built):
callers keep their other path.
"""
from __future__ import annotations

import threading

import numpy as np

from pjrtkit.elementwise_vm.program import (Declined, Input, Program, render,
                                            render_float32_function)

try:
    from pjrtkit.elementwise_vm._vm_cffi import ffi as _ffi, lib as _lib
except ImportError:  # not built: no VM
    ADDRESS = None
else:
    ADDRESS = int(_ffi.cast("uintptr_t", _ffi.addressof(_lib, "pjrtkit_vm_run")))
    # cffi parses a type given as a string at every use (about 4 us for this one)
    _POINTERS = _ffi.typeof("void*[]")
    _FORWARD = int(_ffi.cast("uintptr_t", _ffi.addressof(_lib, "pjrtkit_vm_forward")))


class KernelCell:
    """A C kernel (``address``, ``context``: the ``NativeKernel`` calling convention) that
    runs whichever kernel was last ``publish``-ed: every call loads the current one, so a
    kernel can be replaced while other threads call it. Every kernel published stays alive
    as long as the cell (a thread may still be running an older one)."""

    def __init__(self, address: int, context: int, keepalive=None):
        if ADDRESS is None:
            raise RuntimeError("pjrtkit's elementwise VM is not built")
        self._lock = threading.Lock()
        self._kept = []
        self._cell = np.zeros(1, np.uint64)
        self.publish(address, context, keepalive)

    @property
    def address(self) -> int:
        return _FORWARD

    @property
    def context(self) -> int:
        return int(self._cell.ctypes.data)

    @property
    def current_address(self) -> int:
        """The address of the kernel calls run now (the last one published)."""
        with self._lock:
            return int(self._kept[-1][0][0])

    def publish(self, address: int, context: int, keepalive=None) -> None:
        pair = np.array([address, context], np.uint64)
        with self._lock:
            self._kept.append((pair, keepalive))
            _lib.pjrtkit_vm_cell_store(_ffi.cast("uint64_t*", self.context),
                                       int(pair.ctypes.data))


class Float32FunctionKernel:
    """One of the shared float32 functions (``float32_functions.FUNCTIONS``) as a function of a
    float32 NumPy array, run in C with the GIL released: the NumPy renderer's kernel for them
    (their expressions as NumPy passes would be one pass per operation)."""

    def __init__(self, name: str):
        if ADDRESS is None:
            raise RuntimeError("pjrtkit's elementwise VM is not built")
        program = render_float32_function(name)
        self._code, self._keepalive = program.code, program.keepalive

    def __call__(self, x):
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.empty(x.shape, np.float32)
        code = self._code.copy()  # its element count is this call's
        code[1] = out.size
        # cffi's views of the buffers: numpy's .ctypes.data costs about 3 us each
        status = _lib.pjrtkit_vm_run(_ffi.new(_POINTERS, [_ffi.from_buffer(x)]),
                                     _ffi.new(_POINTERS, [_ffi.from_buffer(out)]),
                                     _ffi.from_buffer(code))
        if status:
            raise RuntimeError(f"pjrtkit's elementwise VM refused a program it rendered "
                               f"(status {status})")
        return out


__all__ = ["ADDRESS", "Declined", "Float32FunctionKernel", "Input", "KernelCell", "Program",
           "render", "render_float32_function"]
