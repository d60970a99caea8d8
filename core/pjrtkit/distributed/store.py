"""The key-value store of a multi-process job: what the PJRT host hands a plugin at
``PJRT_Client_Create`` (jaxlib: the distributed runtime's store, keys prefixed
``"<platform>:"``), seen as one small interface.

It carries rendezvous only: topologies, engine addresses, ranks. Array data never goes
through it; every store counts the bytes it moved (``traffic``) so a test can check that.
"""
from __future__ import annotations

import abc
import dataclasses
import threading

from pjrtkit.errors import ErrorCode, PjrtError


class StoreTimeout(PjrtError):
    code = ErrorCode.DEADLINE_EXCEEDED


@dataclasses.dataclass
class StoreTraffic:
    """What a store moved so far: calls and value bytes, each way."""

    puts: int = 0
    gets: int = 0
    bytes_put: int = 0
    bytes_got: int = 0

    @property
    def total_bytes(self) -> int:
        return self.bytes_put + self.bytes_got


class KeyValueStore(abc.ABC):
    """``put`` once per key; ``get`` waits for a key up to a timeout; ``try_get`` does not
    wait. Values are bytes. Implementations count their traffic through ``_count_*``."""

    def __init__(self) -> None:
        self.traffic = StoreTraffic()
        self._traffic_lock = threading.Lock()

    def put(self, key: str, value: bytes) -> None:
        value = bytes(value)
        self._put(key, value)
        with self._traffic_lock:
            self.traffic.puts += 1
            self.traffic.bytes_put += len(value)

    def get(self, key: str, timeout_s: float) -> bytes:
        """The value of ``key``, waiting up to ``timeout_s``; StoreTimeout naming the key."""
        value = self._get(key, timeout_s)
        self._count_get(value)
        return value

    def try_get(self, key: str) -> bytes | None:
        """The value of ``key``, or None when nobody has put it yet."""
        value = self._try_get(key)
        if value is not None:
            self._count_get(value)
        return value

    def _count_get(self, value: bytes) -> None:
        with self._traffic_lock:
            self.traffic.gets += 1
            self.traffic.bytes_got += len(value)

    @abc.abstractmethod
    def _put(self, key: str, value: bytes) -> None: ...

    @abc.abstractmethod
    def _get(self, key: str, timeout_s: float) -> bytes: ...

    @abc.abstractmethod
    def _try_get(self, key: str) -> bytes | None: ...


class InMemoryStore(KeyValueStore):
    """One store shared by several clients of one process (tests: N "processes" as threads,
    as XLA's GPU plugin tests its topology exchange)."""

    def __init__(self) -> None:
        super().__init__()
        self._values: dict[str, bytes] = {}
        self._condition = threading.Condition()

    def _put(self, key: str, value: bytes) -> None:
        with self._condition:
            if key in self._values:
                raise PjrtError(f"key {key!r} is already set", code=ErrorCode.ALREADY_EXISTS)
            self._values[key] = value
            self._condition.notify_all()

    def _get(self, key: str, timeout_s: float) -> bytes:
        with self._condition:
            if not self._condition.wait_for(lambda: key in self._values, timeout_s):
                raise StoreTimeout(f"key {key!r} was not set within {timeout_s:g} s")
            return self._values[key]

    def _try_get(self, key: str) -> bytes | None:
        with self._condition:
            return self._values.get(key)


class PrefixedStore(KeyValueStore):
    """``store`` with every key under ``prefix`` (traffic counted here and in ``store``)."""

    def __init__(self, store: KeyValueStore, prefix: str) -> None:
        super().__init__()
        self.store = store
        self.prefix = prefix

    def _put(self, key: str, value: bytes) -> None:
        self.store.put(self.prefix + key, value)

    def _get(self, key: str, timeout_s: float) -> bytes:
        return self.store.get(self.prefix + key, timeout_s)

    def _try_get(self, key: str) -> bytes | None:
        return self.store.try_get(self.prefix + key)
