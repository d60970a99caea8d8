"""Where a GPU program's time goes, launch by launch (``PJRTKIT_GPU_LAUNCH_PROFILE=1``).

With the variable set, the process's driver is instrumented when it is made: every kernel
launch and device-to-device copy waits for the device before it returns, and its wall time
(host-side launch cost plus the kernel's run) is added to ``PROFILE`` under the kernel's name.
Waiting serializes what would overlap, so the total is an upper bound of the unprofiled time;
the split between kernel families, and the count of launches per call, are what it is for
(the GPU device check's bench stage reports it for the slowest workloads). Off, nothing is
wrapped and nothing is counted.
"""
from __future__ import annotations

import os
import threading
import time

VARIABLE = "PJRTKIT_GPU_LAUNCH_PROFILE"


def enabled() -> bool:
    return os.environ.get(VARIABLE, "").strip() not in ("", "0")


def kernel_name(kernel) -> str:
    function = getattr(kernel, "fn", kernel)
    return getattr(function, "__name__", None) or getattr(kernel, "name", type(kernel).__name__)


class LaunchProfile:
    """Launches and seconds per kernel name, since the last ``reset``."""

    def __init__(self):
        self._rows: dict[str, list] = {}
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self._rows.clear()

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            row = self._rows.setdefault(name, [0, 0.0])
            row[0] += 1
            row[1] += seconds

    def summary(self, calls: int = 1, top: int = 8) -> dict:
        """Per call (``calls`` runs since the reset): launches, seconds, and the ``top``
        kernel names by seconds."""
        with self._lock:
            rows = sorted(self._rows.items(), key=lambda item: -item[1][1])
        launches = sum(r[0] for _, r in rows)
        seconds = sum(r[1] for _, r in rows)
        return {"launches_per_call": launches / calls, "seconds_per_call": seconds / calls,
                "kernels": [{"name": name, "launches_per_call": count / calls,
                             "seconds_per_call": total / calls,
                             "share": total / seconds if seconds else 0.0}
                            for name, (count, total) in rows[:top]]}


PROFILE = LaunchProfile()


def instrument(driver):
    """``driver`` with its ``launch`` and ``copy`` timed into ``PROFILE`` (each waits for the
    device first)."""
    launch, copy = driver.launch, driver.copy

    def timed_launch(device_index, kernel, grid, args, constexprs, options=None):
        start = time.perf_counter()
        launch(device_index, kernel, grid, args, constexprs, options)
        driver.synchronize(device_index)
        PROFILE.add(kernel_name(kernel), time.perf_counter() - start)

    def timed_copy(dst_memory, src_memory, nbytes):
        start = time.perf_counter()
        copy(dst_memory, src_memory, nbytes)
        driver.synchronize(dst_memory.device_index)
        PROFILE.add("device-to-device copy", time.perf_counter() - start)

    driver.launch, driver.copy = timed_launch, timed_copy
    return driver
