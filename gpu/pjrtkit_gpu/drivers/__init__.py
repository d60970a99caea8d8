"""The runtime seam: one ``Driver`` per vendor (``cuda``, ``hip``) and the emulation driver.

``select_driver(vendor)`` returns the driver a plugin runs on: the emulated one when
``PJRTKIT_GPU_EMULATE=1``, else the vendor's. A vendor driver that cannot start (no driver
library, no device) raises ``FailedPrecondition`` saying why; the plugin's client topology
then fails and ``pjrtkit list`` shows the reason. With ``PJRTKIT_GPU_LAUNCH_PROFILE=1`` the
driver's launches are timed (``launch_profile``).
"""
from __future__ import annotations

import threading

from pjrtkit_gpu import launch_profile, settings

_DRIVERS: dict[str, object] = {}
_LOCK = threading.Lock()


def select_driver(vendor: str):
    """The process's driver for ``vendor`` (``"cuda"`` or ``"hip"``), made once."""
    key = "emulated" if settings.emulation_requested() else vendor
    with _LOCK:
        driver = _DRIVERS.get(key)
        if driver is None:
            if key == "emulated":
                from pjrtkit_gpu.drivers.emulated import EmulatedDriver

                driver = EmulatedDriver()
            elif key == "cuda":
                from pjrtkit_gpu.drivers.cuda import CudaDriver

                driver = CudaDriver()
            elif key == "hip":
                from pjrtkit_gpu.drivers.hip import HipDriver

                driver = HipDriver()
            else:
                raise ValueError(f"unknown GPU vendor {vendor!r}")
            if launch_profile.enabled():
                launch_profile.instrument(driver)
            _DRIVERS[key] = driver
        return driver


def emulated_driver():
    """The process's emulated driver (Triton's interpreter on host memory), whatever
    ``PJRTKIT_GPU_EMULATE`` says: tests that compare the GPU lowering with XLA's CPU backend."""
    with _LOCK:
        driver = _DRIVERS.get("emulated")
        if driver is None:
            from pjrtkit_gpu.drivers.emulated import EmulatedDriver

            driver = _DRIVERS["emulated"] = EmulatedDriver()
        return driver
