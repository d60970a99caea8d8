"""Device memory kept for reuse (the vendor drivers'): a freed allocation goes back to a
per-device list of its rounded size instead of to ``cuMemFree`` / ``hipFree``, and the next
allocation of that size takes it.

Why: the runtime's free waits for the whole device (it is synchronous), so freeing each
temporary of a program stalled the host until the GPU was idle, and its allocation costs a
driver call; a training step frees and allocates the same sizes every step. Safe with the
drivers' ordering: every launch and copy of a device goes on its one stream, so work that
reuses memory runs after the work that used it.

Bounded: at most ``limit_bytes`` per device are kept (what is freed past that is released);
an allocation that the device refuses first releases everything kept on that device and asks
again, and only then is RESOURCE_EXHAUSTED.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

# Sizes are rounded up to this many bytes (so near sizes share a list).
GRANULE = 512


def rounded(nbytes: int) -> int:
    return -(-max(nbytes, 1) // GRANULE) * GRANULE


class MemoryPool:
    """``release(device_index, pointer)`` is the runtime's free; ``limit_bytes``: kept per
    device at most."""

    def __init__(self, release: Callable[[int, int], None], limit_bytes: int):
        self._release = release
        self._limit = limit_bytes
        self._free: dict[tuple[int, int], list[int]] = {}
        self._kept: dict[int, int] = {}
        self._lock = threading.RLock()  # a finalizer may give memory back on any thread

    def take(self, device_index: int, size: int) -> int | None:
        """A kept pointer of ``size`` (rounded) bytes on the device, or None."""
        with self._lock:
            pointers = self._free.get((device_index, size))
            if not pointers:
                return None
            self._kept[device_index] -= size
            return pointers.pop()

    def give(self, device_index: int, size: int, pointer: int) -> None:
        """Memory no array uses any more: kept, or released past the limit."""
        with self._lock:
            if self._kept.get(device_index, 0) + size <= self._limit:
                self._free.setdefault((device_index, size), []).append(pointer)
                self._kept[device_index] = self._kept.get(device_index, 0) + size
                return
        self._release(device_index, pointer)

    def kept_bytes(self, device_index: int) -> int:
        with self._lock:
            return self._kept.get(device_index, 0)

    def release_all(self, device_index: int) -> None:
        """Give everything kept on the device back to the runtime."""
        with self._lock:
            keys = [k for k in self._free if k[0] == device_index]
            pointers = [p for k in keys for p in self._free.pop(k)]
            self._kept[device_index] = 0
        for pointer in pointers:
            self._release(device_index, pointer)
