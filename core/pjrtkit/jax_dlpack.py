"""DLPack for arrays on host-resident pjrtkit platforms: a JAX-version-specific allowlist extension.

jax 0.10.2 offers DLPack only for its cpu and gpu platforms: ``Array.__dlpack_device__`` raises
for any other platform, and jaxlib's exporter refuses devices it does not know. For a pjrtkit
platform whose buffers live in host memory (``like_platform == "cpu"``), this module extends
both directions, in Python, leaving every other platform to JAX:

- export (``np.from_dlpack(x)``, ``x.__dlpack__()``): the array reports a CPU DLPack device and
  exports a host copy of its contents through NumPy's exporter. A pjrtkit buffer is not
  addressable from the host (``PJRT_Buffer_IsOnCpu`` is false), so ``copy=False`` is refused;
  the consumer owns the copy and may write it.
- import (``jax.dlpack.from_dlpack(t, device=d)`` / ``jnp.from_dlpack``, ``t`` a CPU DLPack
  tensor, ``d`` a pjrtkit device, or no device when JAX's cpu platform is not started and the
  default device is a pjrtkit one): NumPy reads the tensor without copying and the data is
  copied into a new buffer on ``d``; ``copy=False`` is refused for the same reason.

``extend_dlpack`` is idempotent; the platforms it serves can grow with each registration.
Patched names (jax 0.10.2): ``ArrayImpl.__dlpack__``, ``ArrayImpl.__dlpack_device__``,
``jax.dlpack.from_dlpack`` (which ``jnp.from_dlpack`` calls).
"""
from __future__ import annotations

from typing import Any

import numpy as np

# DLPack's device type code for host memory (kDLCPU).
DL_CPU = 1

_host_platforms: set[str] = set()
_installed = False


def extend_dlpack(platform: str) -> None:
    """Serve DLPack for arrays on ``platform`` (a host-resident pjrtkit platform)."""
    global _installed
    _host_platforms.add(platform)
    if not _installed:
        _install()
        _installed = True


def _single_host_device(array) -> Any | None:
    """The one device of ``array`` if it is on a served platform, else None."""
    devices = array.sharding.device_set
    if len(devices) != 1:
        return None
    device, = devices
    return device if device.platform in _host_platforms else None


def _install() -> None:
    import jax.dlpack
    from jax._src import array as jax_array
    from jax._src import dlpack as jax_dlpack

    array_class = jax_array.ArrayImpl
    jax_dlpack_device = array_class.__dlpack_device__
    jax_export = array_class.__dlpack__
    jax_import = jax_dlpack.from_dlpack

    def __dlpack_device__(self):
        if _single_host_device(self) is None:
            return jax_dlpack_device(self)
        return jax_dlpack.DLDeviceType.kDLCPU, 0

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if _single_host_device(self) is None:
            return jax_export(self, stream=stream, max_version=max_version,
                              dl_device=dl_device, copy=copy)
        return _export_host_copy(self, stream, max_version, dl_device, copy)

    def from_dlpack(external_array, device=None, copy=None):
        target = _import_target(external_array, device)
        if target is None:
            return jax_import(external_array, device=device, copy=copy)
        return _import_to(external_array, target, copy)

    array_class.__dlpack_device__ = __dlpack_device__
    array_class.__dlpack__ = __dlpack__
    jax_dlpack.from_dlpack = from_dlpack
    jax.dlpack.from_dlpack = from_dlpack


def _export_host_copy(array, stream, max_version, dl_device, copy):
    if copy is False:
        raise BufferError(f"{array.sharding}: a pjrtkit buffer is not addressable from the "
                          f"host, so DLPack can only export a copy; pass copy=None or True")
    if stream is not None:
        raise BufferError(f"stream must be None for a CPU DLPack export, got {stream!r}")
    if dl_device is not None and tuple(int(v) for v in dl_device) != (DL_CPU, 0):
        raise BufferError(f"pjrtkit host arrays export to the CPU DLPack device only, not "
                          f"{dl_device!r}")
    host = np.array(array, copy=True)  # owned and writable: the consumer may keep and write it
    kwargs = {} if max_version is None else {"max_version": max_version}
    return host.__dlpack__(**kwargs)


def _import_target(external_array, device) -> Any | None:
    """The pjrtkit device a CPU DLPack tensor should land on here, or None to leave it to JAX."""
    from jax._src import xla_bridge
    from jax.sharding import Sharding

    dlpack_device = getattr(external_array, "__dlpack_device__", None)
    if dlpack_device is None or int(dlpack_device()[0]) != DL_CPU:
        return None
    if isinstance(device, Sharding):
        devices = device.device_set
        if len(devices) != 1:
            return None
        device, = devices
    if device is None:
        if "cpu" in xla_bridge.backends():
            return None  # JAX's own behaviour: the tensor lands on XLA's cpu device
        import jax

        device = jax.devices()[0]
    return device if device.platform in _host_platforms else None


def _import_to(external_array, device, copy):
    import jax
    from jax._src import dtypes

    if copy is False:
        raise ValueError(f"Specified device={device} which requires a copy: a pjrtkit buffer "
                         f"owns its memory, so copy=False cannot be honoured. Set copy=True or "
                         f"copy=None")
    host = np.from_dlpack(external_array)  # a view of the producer's memory
    return jax.device_put(np.asarray(host, dtype=dtypes.canonicalize_dtype(host.dtype)), device)
