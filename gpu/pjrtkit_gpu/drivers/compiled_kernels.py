"""Ahead-of-time compilation of the Triton kernels for one target, shared by the vendor drivers
and the compile report: the signature of a launch (``signature_of``), ``compile_kernel`` (Triton
-> cubin / hsaco, no device needed) and a per-device cache of loaded kernels.

A compiled Triton kernel takes the launch's non-constexpr arguments (pointers as 64-bit
addresses, integers as int64, as the signature says) and two trailing scratch pointers, passed
as NULL (their sizes are 0 for these kernels).

Specialization, as Triton's own launcher does it: a pointer that is 16-byte aligned and an
integer divisible by 16 are compiled as such (``tt.divisibility = 16``), which lets Triton
vectorize loads and stores and pipeline ``tl.dot``; without it every access is one element
wide. The signature spells it Triton's AOT way (``*fp32:16``, ``i64:16``), so the kernel log,
the precompiled cache and the loaded-kernel cache all key on it.
"""
from __future__ import annotations

import ctypes
import dataclasses
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from pjrtkit_gpu import dtypes, kernel_log
from pjrtkit_gpu.device_array import DeviceArray
from pjrtkit_gpu.targets import BINARY, TARGETS
from pjrtkit_gpu.triton_ir import TritonIrKernel, compile_triton_ir



def kernel_function(kernel):
    """The Python function behind a ``@triton.jit`` kernel."""
    return getattr(kernel, "fn", kernel)


# Triton's specialization: pointers aligned to, and integers divisible by, this many bytes
# (units) are compiled knowing it.
DIVISIBILITY = 16
DIVISIBLE = f":{DIVISIBILITY}"


# kernel id -> (kernel, its parameter names): the kernel is held, so its id is never reused.
_PARAMETERS: dict[int, tuple[Any, tuple[str, ...]]] = {}


def parameter_names(kernel) -> tuple[str, ...]:
    """The kernel function's parameter names, in order (looked up once per kernel: a launch
    needs them, and ``inspect.signature`` costs tens of microseconds)."""
    entry = _PARAMETERS.get(id(kernel))
    if entry is None or entry[0] is not kernel:
        import inspect

        entry = (kernel, tuple(inspect.signature(kernel_function(kernel)).parameters))
        _PARAMETERS[id(kernel)] = entry
    return entry[1]


def launch_tags(args: Sequence[DeviceArray | int]) -> tuple:
    """What of a launch's arguments its compiled kernel depends on (the array dtypes and every
    argument's divisibility hint): with the kernel and constexprs, the loaded-kernel cache's
    key, computed without building the signature."""
    return tuple((a.dtype, a.memory.pointer % DIVISIBILITY == 0) if isinstance(a, DeviceArray)
                 else int(a) % DIVISIBILITY == 0 for a in args)


def split_hints(kernel, signature: Mapping[str, str]) -> tuple[dict[str, str], dict]:
    """``signature`` without its ``:16`` hints, and the hints as Triton's ``attrs`` (keyed by
    the parameter's position among all of the kernel's parameters)."""
    names = parameter_names(kernel)
    plain, attrs = {}, {}
    for name, kind in signature.items():
        kind, _, hint = kind.partition(":")
        plain[name] = kind
        if hint:
            attrs[(names.index(name),)] = [["tt.divisibility", int(hint)]]
    return plain, attrs


def signature_of(kernel, args: Sequence[DeviceArray | int], constexprs: Mapping[str, Any]
                 ) -> dict[str, str]:
    """Triton's signature of a launch: ``*fp32`` for a float32 array, ``i64`` for an int,
    ``constexpr`` for the compile-time constants; ``:16`` after a 16-byte aligned pointer or
    an int divisible by 16 (``DIVISIBILITY``)."""
    names = parameter_names(kernel)
    signature, positional = {}, iter(args)
    for name in names:
        if name in constexprs:
            signature[name] = "constexpr"
            continue
        value = next(positional)
        if isinstance(value, DeviceArray):
            signature[name] = "*" + dtypes.storage_type(value.dtype) + (
                DIVISIBLE if value.pointer % DIVISIBILITY == 0 else "")
        elif isinstance(value, int):
            signature[name] = "i64" + (DIVISIBLE if int(value) % DIVISIBILITY == 0 else "")
        else:
            raise TypeError(f"kernel argument {name}={value!r}: arrays and ints only")
    return signature


def compile_kernel(kernel, signature: Mapping[str, str], constexprs: Mapping[str, Any],
                   target: str, options: Mapping[str, int] | None = None):
    """Triton's compiled kernel for ``target`` (``"sm_90"``, ``"gfx942"``, ...); ``options``:
    Triton's compile options (``num_warps``, ``num_stages``), Triton's defaults when None.
    Triton's own cache (``TRITON_CACHE_DIR``) answers a kernel compiled before with the same
    source, signature, constexprs, options, target and Triton build."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    backend, arch, warp = TARGETS[target]
    plain, attrs = split_hints(kernel, signature)
    source = ASTSource(fn=kernel, signature=plain, constexprs=dict(constexprs), attrs=attrs)
    return triton.compile(source, target=GPUTarget(backend, arch, warp),
                          options=dict(options) if options else None)


@dataclasses.dataclass
class LoadedKernel:
    name: str
    function: Any
    num_warps: int
    shared: int
    signature: dict

    def parameters(self, args):
        """The launch's kernel parameters as the driver's (values, ctypes types) pair."""
        values, types = [], []
        for value in args:
            if isinstance(value, DeviceArray):
                values.append(value.pointer)
                types.append(ctypes.c_void_p)
            else:
                values.append(int(value))
                types.append(ctypes.c_int64)
        values += [0, 0]  # global and profile scratch: unused by these kernels
        types += [ctypes.c_void_p, ctypes.c_void_p]
        return tuple(values), tuple(types)


class CompiledKernels:
    """Loaded kernels per (device, kernel, signature, constexprs), compiled on first use."""

    def __init__(self, backend: str, arch_of, warp_size: int, load_module):
        self._backend = backend
        self._arch_of = arch_of
        self._load_module = load_module
        self._cache: dict[tuple, LoadedKernel] = {}
        self._lock = threading.Lock()

    def get(self, device_index: int, kernel, args, constexprs,
            options: Mapping[str, int] | None = None) -> LoadedKernel:
        """``kernel``: a ``@triton.jit`` function, or a ``triton_ir.TritonIrKernel`` (a Pallas
        kernel: Triton IR whose parameters are all pointers). ``options``: Triton's compile
        options (part of the key)."""
        if isinstance(kernel, TritonIrKernel):
            signature = {}
            key = (device_index, kernel.key)

            def compile_for(target):
                return compile_triton_ir(kernel, target)
        else:
            key = (device_index, id(kernel), launch_tags(args), tuple(sorted(
                (k, str(v)) for k, v in constexprs.items())),
                tuple(sorted(options.items())) if options else ())
            loaded = self._cache.get(key)  # the launch path: no lock, no signature
            if loaded is not None:
                return loaded
            parameter_names(kernel)  # holds the kernel: its id stays its own
            signature = signature_of(kernel, args, constexprs)

            def compile_for(target):
                return compile_kernel(kernel, signature, constexprs, target, options)
        with self._lock:
            loaded = self._cache.get(key)
            if loaded is None:
                arch = self._arch_of(device_index)
                target = f"sm_{arch}" if self._backend == "cuda" else arch
                with kernel_log.compiling(kernel, signature, constexprs, options, target):
                    compiled = compile_for(target)
                if getattr(compiled.metadata, "global_scratch_size", 0) or \
                        getattr(compiled.metadata, "profile_scratch_size", 0):
                    from pjrtkit.errors import Unimplemented

                    raise Unimplemented(
                        f"kernel {compiled.metadata.name} for {target} needs Triton's global "
                        f"or profile scratch memory, which the drivers do not allocate")
                binary = compiled.asm[BINARY[self._backend]]
                name = compiled.metadata.name
                function = self._load_module(device_index, binary, name, compiled.metadata.shared)
                loaded = LoadedKernel(name, function, compiled.metadata.num_warps,
                                      compiled.metadata.shared, signature)
                self._cache[key] = loaded
            return loaded
