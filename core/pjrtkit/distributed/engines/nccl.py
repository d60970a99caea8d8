"""NCCL (NVIDIA) and RCCL (AMD) for plugins whose payloads live in GPU memory.

What is here: finding the library and the driver (their absence is FAILED_PRECONDITION naming
what is missing), and the bootstrap every NCCL job needs: the group's first process makes a
unique id (``ncclGetUniqueId``), puts it in the job's key-value store, and every member makes
its communicator from it (``ncclCommInitRank``). Moving host arrays is not what these engines
do: a plugin with host payloads uses gloo or MPI, and no pjrtkit GPU plugin has device
collectives yet, so ``all_gather`` is UNIMPLEMENTED saying so. (NCCL refuses two ranks on one
GPU, so nothing on a one-GPU machine can run a real job of two.)
"""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import pathlib
from collections.abc import Callable, Sequence

import numpy as np

from pjrtkit.distributed.engines.base import (CollectiveEngine, Communicators,
                                              EngineUnavailable)
from pjrtkit.errors import Unimplemented

UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES, the same in RCCL


def _load(names: Sequence[str]) -> ctypes.CDLL | None:
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _wheel_library(package: str, file: str) -> list[str]:
    """The library a pip wheel installs (``nvidia-nccl-cu12``: nvidia/nccl/lib/libnccl.so.2)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [str(pathlib.Path(p) / "lib" / file) for p in spec.submodule_search_locations]


def bootstrap_unique_id(store, key: str, rank: int, make_unique_id: Callable[[], bytes],
                        timeout_s: float) -> bytes:
    """The group's unique id: made by rank 0 and published under ``key``, read by the others
    (only these bytes go through the store)."""
    if rank == 0:
        unique_id = bytes(make_unique_id())
        if len(unique_id) != UNIQUE_ID_BYTES:
            raise ValueError(f"a unique id has {UNIQUE_ID_BYTES} bytes, got {len(unique_id)}")
        store.put(key, unique_id)
        return unique_id
    return store.get(key, timeout_s)


class _NcclLike(CollectiveEngine):
    library_names: tuple[str, ...] = ()
    driver_names: tuple[str, ...] = ()
    driver: str = ""

    @classmethod
    def _library_candidates(cls) -> list[str]:
        return list(cls.library_names)

    @classmethod
    def problem(cls) -> str | None:
        if _load(cls._library_candidates()) is None:
            return (f"the {cls.name.upper()} library ({cls.library_names[0]}) is not found "
                    f"(pip install '{cls.extra}')")
        if _load(cls.driver_names) is None:
            return f"no {cls.driver} driver ({cls.driver_names[0]} cannot be loaded)"
        return None

    def __init__(self, runtime):
        super().__init__(runtime)
        problem = self.problem()
        if problem:
            raise EngineUnavailable(f"{self.name}: {problem}")
        self._lib = _load(self._library_candidates())
        self._comms = Communicators(self._make_communicator)

    def _check(self, result: int, call: str) -> None:
        if result != 0:
            self._lib.ncclGetErrorString.restype = ctypes.c_char_p
            text = self._lib.ncclGetErrorString(result).decode(errors="replace")
            raise EngineUnavailable(f"{self.name}: {call} failed: {text} (code {result})")

    def _unique_id(self) -> bytes:
        buffer = ctypes.create_string_buffer(UNIQUE_ID_BYTES)
        self._check(self._lib.ncclGetUniqueId(buffer), "ncclGetUniqueId")
        return buffer.raw

    def communicator(self, devices: tuple[int, ...], processes: tuple[int, ...]):
        """The group's communicator, bootstrapped through the key-value store."""
        return self._comms.get(devices, processes)

    def _make_communicator(self, devices: tuple[int, ...], processes: tuple[int, ...]):
        runtime = self.runtime
        rank = processes.index(runtime.placement.node_id)
        key = f"{self.name}/" + ",".join(map(str, devices)) + "/unique-id"
        unique_id = bootstrap_unique_id(runtime.store, key, rank, self._unique_id,
                                        runtime.rendezvous_timeout_s)
        comm = ctypes.c_void_p()
        id_struct = (ctypes.c_char * UNIQUE_ID_BYTES).from_buffer_copy(unique_id)
        self._check(self._lib.ncclCommInitRank(ctypes.byref(comm), len(processes), id_struct,
                                               rank), "ncclCommInitRank")
        return comm

    def all_gather(self, devices: tuple[int, ...], processes: tuple[int, ...],
                   block: np.ndarray) -> Sequence[np.ndarray]:
        raise Unimplemented(f"{self.name} moves GPU memory; these payloads are host arrays "
                            f"(use PJRTKIT_COLLECTIVES=gloo or mpi)")

    def close(self) -> None:
        for comm in self._comms.take_all():
            self._lib.ncclCommDestroy(comm)


class NcclEngine(_NcclLike):
    name = "nccl"
    extra = "nvidia-nccl-cu12"
    library_names = ("libnccl.so.2", "libnccl.so")
    driver_names = ("libcuda.so.1",)
    driver = "NVIDIA"

    @classmethod
    def _library_candidates(cls) -> list[str]:
        return _wheel_library("nvidia.nccl", "libnccl.so.2") + list(cls.library_names)


class RcclEngine(_NcclLike):
    name = "rccl"
    extra = "ROCm's rccl"
    library_names = ("librccl.so.1", "librccl.so", "/opt/rocm/lib/librccl.so.1")
    driver_names = ("libamdhip64.so.6", "libamdhip64.so", "/opt/rocm/lib/libamdhip64.so")
    driver = "AMD ROCm"
