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


class MemoryPool:
    """Bytes that several memory spaces draw from (the host's RAM, shared by a client's
    host-backed memories). ``limit_bytes`` None: no limit known."""

    def __init__(self, name: str, limit_bytes: int | None):
        self.name = name
        self.limit_bytes = limit_bytes
        self._lock = threading.Lock()
        self.bytes_in_use = 0
        self.peak_bytes_in_use = 0

    def check(self, nbytes: int, describe_request) -> None:
        """Raise ResourceExhausted (``describe_request()`` says for what) when ``nbytes`` more
        would pass the limit now; counts nothing."""
        in_use = self.bytes_in_use + nbytes
        if self.limit_bytes is not None and nbytes > 0 and in_use > self.limit_bytes:
            raise ResourceExhausted(
                f"{describe_request()}: {self.name} would exceed its limit of "
                f"{format_bytes(self.limit_bytes)} ({format_bytes(self.bytes_in_use)} in use)")

    def take(self, nbytes: int, describe_request) -> None:
        """Count ``nbytes`` more, or raise ResourceExhausted (``describe_request()`` says for
        what) leaving the count unchanged."""
        with self._lock:
            self.check(nbytes, describe_request)
            in_use = self.bytes_in_use + nbytes
            self.bytes_in_use = in_use
            if in_use > self.peak_bytes_in_use:
                self.peak_bytes_in_use = in_use

    def give_back(self, nbytes: int) -> None:
        with self._lock:
            self.bytes_in_use -= nbytes
