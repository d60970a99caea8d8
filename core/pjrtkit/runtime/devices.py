"""Devices, device descriptions and memory spaces of a client or a compile-only topology."""
from __future__ import annotations

from pjrtkit.errors import InvalidArgument, ResourceExhausted
from pjrtkit.runtime.memory_limits import FITS, POOL_LIMIT, Ledger, MemoryPool, format_bytes
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
    the ``pool`` it shares (None: none). The counts live in its ``ledger``."""

    def __init__(self, memory_id: int, kind: str, capacity_bytes: int | None,
                 limit_bytes: int | None = None, pool: MemoryPool | None = None):
        self.id = memory_id
        self.kind = kind
        self.kind_id = MEMORY_KINDS.index(kind) if kind in MEMORY_KINDS else len(MEMORY_KINDS)
        self.capacity_bytes = capacity_bytes
        self.pool = pool
        self.ledger = Ledger(limit_bytes, pool.ledger if pool is not None else None)
        self.devices: list[Device] = []
        self.debug_string = f"memory {memory_id} ({kind})"
        self.to_string = f"Memory(id={memory_id}, kind={kind})"

    @property
    def limit_bytes(self) -> int | None:
        return self.ledger.limit_bytes

    @property
    def bytes_in_use(self) -> int:
        return self.ledger.counts()[0]

    def allocated(self, nbytes: int, array: tuple | None = None) -> None:
        """Count a new buffer of ``nbytes``; ResourceExhausted (nothing counted) when it would
        pass this memory's limit or its pool's. ``array`` is its ``(dtype, shape)``, for the
        message (formatted only then: this runs for every buffer)."""
        refusal = self.ledger.take(nbytes)
        if refusal != FITS:
            raise self._refused(refusal, nbytes, array)

    def check_room(self, nbytes: int, array: tuple | None = None) -> None:
        """ResourceExhausted when a buffer of ``nbytes`` would not fit now; counts nothing
        (for callers that must know before they read the data, e.g. from the host)."""
        refusal = self.ledger.check(nbytes)
        if refusal != FITS:
            raise self._refused(refusal, nbytes, array)

    def _refused(self, refusal: int, nbytes: int, array: tuple | None) -> ResourceExhausted:
        if refusal == POOL_LIMIT:
            return self.pool.refused(nbytes, lambda: self._request(nbytes, array))
        limit = self.limit_bytes
        return ResourceExhausted(
            f"{self._request(nbytes, array)}: would exceed the memory's limit of "
            f"{format_bytes(limit)} ({format_bytes(self.bytes_in_use)} in use)")

    def _request(self, nbytes: int, array: tuple | None) -> str:
        device = self.devices[0].debug_string if self.devices else "no device"
        what = f"{array[0]}{list(array[1])}" if array else "a buffer"
        return f"allocating {format_bytes(nbytes)} for {what} in {self.kind} memory of {device}"

    def freed(self, nbytes: int) -> None:
        self.ledger.give(nbytes)

    @property
    def effective_limit_bytes(self) -> int | None:
        """The most this memory could hold: its own limit or its pool's, the smaller."""
        limits = [x for x in (self.limit_bytes, self.pool and self.pool.limit_bytes)
                  if x is not None]
        return min(limits) if limits else None

    def stats(self) -> MemoryStats:
        in_use, peak, allocs, largest = self.ledger.counts()
        pool = self.pool
        pool_counts = pool.ledger.counts() if pool is not None else None
        return MemoryStats(in_use, peak, allocs, largest, self.effective_limit_bytes,
                           pool_counts[0] if pool_counts else None,
                           pool_counts[1] if pool_counts else None)


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
