"""Devices, device descriptions and memory spaces of a client or a compile-only topology."""
from __future__ import annotations

import threading

from pjrtkit.errors import InvalidArgument, ResourceExhausted
from pjrtkit.runtime.memory_limits import MemoryPool, format_bytes
from pjrtkit.types import MEMORY_KINDS, DeviceSpec, MemoryStats


def _attributes(spec: DeviceSpec) -> dict:
    attrs = dict(spec.attributes)
    attrs.setdefault("coords", tuple(spec.coords))
    attrs.setdefault("core_on_chip", spec.core_on_chip)
    return attrs


class DeviceDescription:
    """The facts about one device (PJRT_DeviceDescription_*); compile-only topology devices
    are descriptions only."""

    def __init__(self, spec: DeviceSpec, platform_name: str):
        self.spec = spec
        self.id = spec.id
        self.process_index = spec.process_index
        self.kind = spec.kind
        self.attributes = _attributes(spec)
        self.debug_string = f"{platform_name}:{spec.id} ({spec.kind})"
        self.to_string = (f"{type(self).__name__}(platform={platform_name}, id={spec.id}, "
                          f"process_index={spec.process_index}, coords={tuple(spec.coords)})")


class Memory:
    """One memory space of a device, with the allocation statistics the core tracks and the
    limits it enforces (``runtime/memory_limits.py``): its own ``limit_bytes`` (None: none) and
    the ``pool`` it shares (None: none)."""

    def __init__(self, memory_id: int, kind: str, capacity_bytes: int | None,
                 limit_bytes: int | None = None, pool: MemoryPool | None = None):
        self.id = memory_id
        self.kind = kind
        self.kind_id = MEMORY_KINDS.index(kind) if kind in MEMORY_KINDS else len(MEMORY_KINDS)
        self.capacity_bytes = capacity_bytes
        self.limit_bytes = limit_bytes
        self.pool = pool
        self.devices: list[Device] = []
        self.debug_string = f"memory {memory_id} ({kind})"
        self.to_string = f"Memory(id={memory_id}, kind={kind})"
        self._lock = threading.Lock()
        self.bytes_in_use = 0
        self.peak_bytes_in_use = 0
        self.num_allocs = 0
        self.largest_alloc_size = 0

    def allocated(self, nbytes: int, array: tuple | None = None) -> None:
        """Count a new buffer of ``nbytes``; ResourceExhausted (nothing counted) when it would
        pass this memory's limit or its pool's. ``array`` is its ``(dtype, shape)``, for the
        message (formatted only then: this runs for every buffer)."""
        # Runs for every buffer, execution outputs included: comparisons, not max() calls.
        with self._lock:
            in_use = self.bytes_in_use + nbytes
            self._check_own_limit(nbytes, array)
            if self.pool is not None:
                self.pool.take(nbytes, lambda: self._request(nbytes, array))
            self.bytes_in_use = in_use
            if in_use > self.peak_bytes_in_use:
                self.peak_bytes_in_use = in_use
            self.num_allocs += 1
            if nbytes > self.largest_alloc_size:
                self.largest_alloc_size = nbytes

    def check_room(self, nbytes: int, array: tuple | None = None) -> None:
        """ResourceExhausted when a buffer of ``nbytes`` would not fit now; counts nothing
        (for callers that must know before they read the data, e.g. from the host)."""
        with self._lock:
            self._check_own_limit(nbytes, array)
            if self.pool is not None:
                self.pool.check(nbytes, lambda: self._request(nbytes, array))

    def _check_own_limit(self, nbytes: int, array: tuple | None) -> None:
        limit = self.limit_bytes
        if limit is not None and nbytes > 0 and self.bytes_in_use + nbytes > limit:
            raise ResourceExhausted(
                f"{self._request(nbytes, array)}: would exceed the memory's limit of "
                f"{format_bytes(limit)} ({format_bytes(self.bytes_in_use)} in use)")

    def _request(self, nbytes: int, array: tuple | None) -> str:
        device = self.devices[0].debug_string if self.devices else "no device"
        what = f"{array[0]}{list(array[1])}" if array else "a buffer"
        return f"allocating {format_bytes(nbytes)} for {what} in {self.kind} memory of {device}"

    def freed(self, nbytes: int) -> None:
        with self._lock:
            self.bytes_in_use -= nbytes
            if self.pool is not None:
                self.pool.give_back(nbytes)

    @property
    def effective_limit_bytes(self) -> int | None:
        """The most this memory could hold: its own limit or its pool's, the smaller."""
        limits = [x for x in (self.limit_bytes, self.pool and self.pool.limit_bytes)
                  if x is not None]
        return min(limits) if limits else None

    def stats(self) -> MemoryStats:
        with self._lock:
            pool = self.pool
            return MemoryStats(self.bytes_in_use, self.peak_bytes_in_use, self.num_allocs,
                               self.largest_alloc_size, self.effective_limit_bytes,
                               pool.bytes_in_use if pool else None,
                               pool.peak_bytes_in_use if pool else None)


class Device(DeviceDescription):
    """A device of a live client, with its memories."""

    def __init__(self, client, spec: DeviceSpec, memories: list[Memory]):
        super().__init__(spec, client.platform_name)
        self.client = client
        self.local_hardware_id = spec.local_hardware_id
        self.is_addressable = spec.process_index == client.process_index
        self.memories = memories
        by_kind = {m.kind: m for m in memories}
        if spec.default_memory_kind not in by_kind:
            raise InvalidArgument(f"{client.platform_name}: device {spec.id} declares default "
                                  f"memory kind {spec.default_memory_kind!r} but has "
                                  f"{sorted(by_kind)}")
        self.default_memory = by_kind[spec.default_memory_kind]
        self._by_kind = by_kind

    @property
    def description(self) -> DeviceDescription:
        return self

    def memory(self, kind: str) -> Memory:
        try:
            return self._by_kind[kind]
        except KeyError:
            raise InvalidArgument(f"device {self.id} has no memory of kind {kind!r}; it has "
                                  f"{sorted(self._by_kind)}") from None

    def memory_stats(self) -> MemoryStats:
        return self.client.backend.memory_stats(device=self.spec,
                                                tracked=self.default_memory.stats())
