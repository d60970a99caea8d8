"""Vendor libraries as an optional fast path: cuBLAS (nvmath-python) on the cuda driver,
hipBLAS (hip-python's library bindings) on the hip driver. Only the gemm of dot_general so
far (``lowering/dot.py``); the Triton kernels and the core's expansions are always the
fallback.

``gemm_runner`` is the one question the lowering asks, at compile time: for this dot on this
device, a function enqueuing it through the library, or None (the Triton path). It reads
``PJRTKIT_GPU_VENDOR_LIBRARIES`` (``settings.vendor_libraries_mode``):

- ``off``: None, and no library is imported or probed;
- ``auto`` (default): the library where ``availability`` says so (decided once per driver
  and device), else None, the reason logged once; under emulation None at once (nothing is
  imported);
- ``require``: as ``auto``, but a dot the library would run fails the compile with
  FAILED_PRECONDITION naming what is missing.

A dot whose dtypes or layout the library does not take (``VendorLibraries.supports_gemm``)
is always the Triton path's, in every mode.
"""
from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable

from pjrtkit.errors import FailedPrecondition, InvalidArgument

from pjrtkit_gpu import settings
from pjrtkit_gpu.vendor.base import (Availability, GemmSpec, VendorLibraries,
                                     VendorUnavailable)

__all__ = ["IMPLEMENTATIONS", "Availability", "GemmSpec", "VendorLibraries", "VendorUnavailable",
           "gemm_runner", "libraries_for"]

_LOG = logging.getLogger("pjrtkit_gpu.vendor")
_LIBRARIES: dict[tuple[int, str], VendorLibraries] = {}
_LOGGED: set[tuple[int, str, int]] = set()
_LOCK = threading.Lock()


# GPU vendor -> its ``VendorLibraries`` ("module:class", imported on first use, or the class).
IMPLEMENTATIONS: dict[str, str | type[VendorLibraries]] = {
    "cuda": "pjrtkit_gpu.vendor.cuda:CudaLibraries",
    "hip": "pjrtkit_gpu.vendor.hip:HipLibraries",
}


def _implementation(vendor: str) -> type[VendorLibraries]:
    where = IMPLEMENTATIONS.get(vendor)
    if where is None:
        raise ValueError(f"no vendor libraries for GPU vendor {vendor!r} "
                         f"({', '.join(IMPLEMENTATIONS)})")
    if isinstance(where, str):
        module, _, name = where.partition(":")
        return getattr(importlib.import_module(module), name)
    return where


def libraries_for(driver, vendor: str) -> VendorLibraries:
    """The process's ``VendorLibraries`` of ``vendor`` on ``driver``, made once (drivers live
    as long as the process; the emulated one serves both vendors, so the key names both)."""
    key = (id(driver), vendor)
    with _LOCK:
        libraries = _LIBRARIES.get(key)
        if libraries is None:
            libraries = _LIBRARIES[key] = _implementation(vendor)(driver)
        return libraries


def gemm_runner(driver, vendor: str | None, device_index: int, spec: GemmSpec,
                platform: str) -> Callable[[int, int, int], None] | None:
    """``run(a, b, c)`` (device pointers) enqueuing ``spec`` through the vendor's BLAS on the
    device's stream, or None for the Triton path; FAILED_PRECONDITION under ``require`` when
    the library cannot run it; INVALID_ARGUMENT for a bad setting."""
    try:
        mode = settings.vendor_libraries_mode()
    except ValueError as exc:
        raise InvalidArgument(f"{platform}: {exc}") from None
    if mode == "off" or vendor is None:
        return None
    if mode == "auto" and getattr(driver, "interprets", False):
        return None  # emulated: no library can run; not even imported (require says why)
    libraries = libraries_for(driver, vendor)
    if not libraries.supports_gemm(spec):
        return None
    available, reason = libraries.availability(device_index)
    if available:
        def run(a: int, b: int, c: int) -> None:
            libraries.gemm(device_index, spec, a, b, c)

        return run
    if mode == "require":
        raise FailedPrecondition(
            f"{platform}: {settings.VENDOR_LIBRARIES_VARIABLE}=require, but "
            f"{libraries.blas_name} cannot run this dot_general ({spec.dtype.name}, batch "
            f"{spec.batch}, {spec.m}x{spec.k} @ {spec.k}x{spec.n}) on device {device_index}: "
            f"{reason}")
    key = (id(driver), vendor, device_index)
    with _LOCK:
        first = key not in _LOGGED
        _LOGGED.add(key)
    if first:
        _LOG.log(logging.DEBUG if getattr(driver, "interprets", False) else logging.INFO,
                 "%s: dots run on the Triton kernels, not %s, on device %d: %s", platform,
                 libraries.blas_name, device_index, reason)
    return None
