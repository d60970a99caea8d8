"""Memory limits: how many bytes a memory space may hold, and which bytes it shares.

Accounted, not reserved: nothing is set aside at start-up; every buffer's size is counted when
it is made and checked against two limits, and a buffer that would pass either is refused with
RESOURCE_EXHAUSTED naming the sizes (before any byte of it is allocated).

- The memory's own limit: a memory space a plugin declares with ``capacity_bytes=N`` (a TPU's
  HBM) holds at most N bytes; ``PJRTKIT_<BACKEND>_MEMORY_LIMIT`` caps every device's default
  memory of that backend further (a per-device limit).
- The host pool: every memory space declared with ``capacity_bytes=None`` (host RAM: all of a
  cpu device's memories, a TPU's pinned_host) draws from ONE pool per client whose limit is the
  host's physical memory, so N cpu devices share the host rather than each claiming all of it.
"""
from __future__ import annotations

import os
import re
import threading

from pjrtkit.errors import InvalidArgument, ResourceExhausted

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def memory_limit_variable(backend_name: str) -> str:
    """The setting for a backend's per-device limit: ``PJRTKIT_CPU_MEMORY_LIMIT`` for cpu."""
    return f"PJRTKIT_{backend_name.upper()}_MEMORY_LIMIT"


def parse_size(text: str, variable: str) -> int:
    """``"1073741824"``, ``"512M"``, ``"4GiB"``, ``"2g"`` -> bytes (binary units)."""
    match = _SIZE.match(text)
    if match is None or int(match.group(1)) <= 0:
        raise InvalidArgument(f"{variable}={text!r} is not a size: write a positive number of "
                              f"bytes, optionally with K, M, G or T (binary units), e.g. 4G")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def per_device_limit(backend_name: str) -> int | None:
    """The user's per-device limit for a backend, or None when not set."""
    variable = memory_limit_variable(backend_name)
    raw = os.environ.get(variable, "").strip()
    return parse_size(raw, variable) if raw else None


def host_memory_bytes() -> int | None:
    """The host's physical memory, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def format_bytes(nbytes: int) -> str:
    """``1099511627776`` -> ``"1099511627776 bytes (1.0 TiB)"``."""
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            break
        size /= 1024
    return f"{nbytes} bytes ({size:.1f} {unit})"


# What ``Ledger.take`` / ``Ledger.check`` answer: counted (or would fit), past the ledger's
# own limit, past its pool's.
FITS, OWN_LIMIT, POOL_LIMIT = 0, 1, 2


class Ledger:
    """The counts of one memory space (or of a pool several share) against a limit: bytes in
    use, their peak, allocations and the largest one. A memory's ledger also draws from its
    pool's. This is the Python one; a client whose handles C reads (the ABI) gets ledgers with
    the same methods whose counts live in C (``pjrtkit.abi.native.CLedger``), so that buffers
    the C execute path makes are counted in the same place."""

    __slots__ = ("_lock", "limit_bytes", "pool", "bytes_in_use", "peak_bytes_in_use",
                 "num_allocs", "largest_alloc_size")

    def __init__(self, limit_bytes: int | None, pool: "Ledger | None" = None):
        self._lock = threading.Lock()
        self.limit_bytes = limit_bytes  # None: no limit
        self.pool = pool
        self.bytes_in_use = 0
        self.peak_bytes_in_use = 0
        self.num_allocs = 0
        self.largest_alloc_size = 0

    def _refusal(self, nbytes: int) -> int:
        if nbytes <= 0:
            return FITS
        if self.limit_bytes is not None and self.bytes_in_use + nbytes > self.limit_bytes:
            return OWN_LIMIT
        pool = self.pool
        if (pool is not None and pool.limit_bytes is not None
                and pool.bytes_in_use + nbytes > pool.limit_bytes):
            return POOL_LIMIT
        return FITS

    def check(self, nbytes: int) -> int:
        """Whether ``nbytes`` more would fit now (FITS, OWN_LIMIT or POOL_LIMIT); counts
        nothing."""
        with _LEDGERS_LOCK:
            return self._refusal(nbytes)

    def take(self, nbytes: int) -> int:
        """Count ``nbytes`` here and in the pool (FITS), or nothing (OWN_LIMIT, POOL_LIMIT)."""
        with _LEDGERS_LOCK:
            refusal = self._refusal(nbytes)
            if refusal == FITS:
                in_use = self.bytes_in_use + nbytes
                self.bytes_in_use = in_use
                if in_use > self.peak_bytes_in_use:
                    self.peak_bytes_in_use = in_use
                self.num_allocs += 1
                if nbytes > self.largest_alloc_size:
                    self.largest_alloc_size = nbytes
                pool = self.pool
                if pool is not None:
                    pool.bytes_in_use += nbytes
                    if pool.bytes_in_use > pool.peak_bytes_in_use:
                        pool.peak_bytes_in_use = pool.bytes_in_use
            return refusal

    def give(self, nbytes: int) -> None:
        with _LEDGERS_LOCK:
            self.bytes_in_use -= nbytes
            if self.pool is not None:
                self.pool.bytes_in_use -= nbytes

    def counts(self) -> tuple[int, int, int, int]:
        """(bytes in use, peak, allocations, largest allocation), read together."""
        with _LEDGERS_LOCK:
            return (self.bytes_in_use, self.peak_bytes_in_use, self.num_allocs,
                    self.largest_alloc_size)


# One lock for every Python ledger: a memory's count and its pool's change together, and each
# critical section is a few additions.
_LEDGERS_LOCK = threading.Lock()


class MemoryPool:
    """Bytes that several memory spaces draw from (the host's RAM, shared by a client's
    host-backed memories). ``limit_bytes`` None: no limit known. The counts are its
    ``ledger``'s, which each member memory's ledger draws from."""

    def __init__(self, name: str, limit_bytes: int | None):
        self.name = name
        self.ledger = Ledger(limit_bytes)

    @property
    def limit_bytes(self) -> int | None:
        return self.ledger.limit_bytes

    @limit_bytes.setter
    def limit_bytes(self, value: int | None) -> None:
        self.ledger.limit_bytes = value

    @property
    def bytes_in_use(self) -> int:
        return self.ledger.counts()[0]

    @property
    def peak_bytes_in_use(self) -> int:
        return self.ledger.counts()[1]

    def refused(self, nbytes: int, describe_request) -> ResourceExhausted:
        """The error for a request of ``nbytes`` this pool's limit refused."""
        return ResourceExhausted(
            f"{describe_request()}: {self.name} would exceed its limit of "
            f"{format_bytes(self.limit_bytes)} ({format_bytes(self.bytes_in_use)} in use)")

    def check(self, nbytes: int, describe_request) -> None:
        """Raise ResourceExhausted (``describe_request()`` says for what) when ``nbytes`` more
        would pass the limit now; counts nothing."""
        if self.ledger.check(nbytes) != FITS:
            raise self.refused(nbytes, describe_request)

    def take(self, nbytes: int, describe_request) -> None:
        """Count ``nbytes`` more, or raise ResourceExhausted (``describe_request()`` says for
        what) leaving the count unchanged."""
        if self.ledger.take(nbytes) != FITS:
            raise self.refused(nbytes, describe_request)

    def give_back(self, nbytes: int) -> None:
        self.ledger.give(nbytes)
