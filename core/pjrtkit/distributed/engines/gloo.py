"""gloo through torch.distributed: launcher-free (what XLA's CPU backend and PyTorch use).

No ``init_process_group``: each group of devices gets its own ``ProcessGroupGloo`` over a
``torch.distributed.Store`` that is the job's key-value store (``KvTorchStore``), under a
prefix naming the group, so only the group's processes take part in making it. gloo puts each
rank's listening address in the store and connects the full mesh over TCP; the data then moves
over those connections. ``GLOO_SOCKET_IFNAME`` picks the network interface (gloo's own setting).
"""
from __future__ import annotations

import datetime
from collections.abc import Sequence

import numpy as np

from pjrtkit.distributed.engines.base import (CollectiveEngine, Communicators,
                                              engine_timeout_s, module_missing)


def _torch_store_class():
    import torch.distributed as dist

    class KvTorchStore(dist.Store):
        """torch's Store interface over a ``pjrtkit.distributed.store.KeyValueStore``: set,
        get, wait and check are what ProcessGroupGloo uses; counters (add, compare_set) need
        an atomic store and are refused."""

        def __init__(self, store, timeout_s: float):
            super().__init__()
            self._store = store
            self._timeout_s = timeout_s

        def set(self, key, value):
            self._store.put(key, value if isinstance(value, bytes) else str(value).encode())

        def get(self, key):
            return self._store.get(key, self._timeout_s)

        def wait(self, keys, timeout=None):
            seconds = self._timeout_s if timeout is None else timeout.total_seconds()
            for key in keys:
                self._store.get(key, seconds)

        def check(self, keys):
            return all(self._store.try_get(key) is not None for key in keys)

        def add(self, key, amount):
            raise NotImplementedError("the PJRT key-value store has no atomic add")

        def compare_set(self, key, expected, desired):
            raise NotImplementedError("the PJRT key-value store has no compare-and-set")

    return KvTorchStore


class GlooEngine(CollectiveEngine):
    name = "gloo"
    extra = "pjrtkit[gloo]"

    @classmethod
    def problem(cls) -> str | None:
        if module_missing("torch"):
            return "torch is not installed (pip install 'pjrtkit[gloo]')"
        return None

    @classmethod
    def prepare(cls) -> None:
        import torch.distributed  # noqa: F401 - about 2 s; done before the first collective

    def __init__(self, runtime):
        super().__init__(runtime)
        self._groups = Communicators(self._make_group)
        self._store = _torch_store_class()(runtime.store, runtime.rendezvous_timeout_s)
        self._timeout = datetime.timedelta(seconds=engine_timeout_s())

    def _make_group(self, devices: tuple[int, ...], processes: tuple[int, ...]):
        import torch.distributed as dist

        node = self.runtime.placement.node_id
        prefix = "gloo/" + ",".join(map(str, devices)) + "/"
        return dist.ProcessGroupGloo(dist.PrefixStore(prefix, self._store),
                                     processes.index(node), len(processes), self._timeout)

    def all_gather(self, devices: tuple[int, ...], processes: tuple[int, ...],
                   block: np.ndarray) -> Sequence[np.ndarray]:
        import torch

        group = self._groups.get(devices, processes)
        mine = torch.from_numpy(block)
        out = [torch.empty_like(mine) for _ in processes]
        group.allgather([out], [mine]).wait()
        return [t.numpy() for t in out]

    def close(self) -> None:
        self._groups.take_all()
