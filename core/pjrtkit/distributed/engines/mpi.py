"""MPI through mpi4py, for jobs an MPI launcher started (``mpiexec -n N python prog.py``;
JAX finds the job with ``jax.distributed.initialize(cluster_detection_method="mpi4py")`` or
``initialize()`` under Open MPI/Slurm).

Ranks: each process puts its ``COMM_WORLD`` rank in the key-value store under its JAX process
id, so the two numberings need not agree. Each group of devices gets its own communicator
(``MPI_Comm_create_group`` over the group's ranks, called by its members only). Joining
processes that no launcher started (singleton MPI and ``Comm_connect``) is not used.
"""
from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Sequence

import numpy as np

from pjrtkit.distributed.engines.base import (CollectiveEngine, Communicators, EngineUnavailable,
                                              module_missing)

# What MPI launchers put in the environment of the processes they start (MPICH/Hydra, Open MPI,
# Intel MPI, Slurm's PMI/PMIx).
LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
                      "MPI_LOCALRANKID", "HYDI_CONTROL_FD")


def launched_by_mpi() -> bool:
    return any(v in os.environ for v in LAUNCHER_VARIABLES)


class MpiEngine(CollectiveEngine):
    name = "mpi"
    extra = "pjrtkit[mpi]"

    @classmethod
    def problem(cls) -> str | None:
        if module_missing("mpi4py"):
            return "mpi4py is not installed (pip install 'pjrtkit[mpi]')"
        if not launched_by_mpi():
            return ("this process was not started by an MPI launcher (run the job with "
                    "mpiexec -n N ...)")
        return None

    @classmethod
    def prepare(cls) -> None:
        from mpi4py import MPI  # noqa: F401 - initializes MPI (as jax's mpi4py detection does)

    def __init__(self, runtime):
        super().__init__(runtime)
        self._lock = threading.Lock()
        self._comms = Communicators(self._make_comm)
        self._ranks: list[int] | None = None

    def _world_ranks(self, world) -> list[int]:
        with self._lock:
            return self._world_ranks_locked(world)

    def _world_ranks_locked(self, world) -> list[int]:
        if self._ranks is None:
            runtime = self.runtime
            placement = runtime.placement
            if world.Get_size() < placement.num_nodes:
                raise EngineUnavailable(
                    f"MPI's world has {world.Get_size()} process(es) but the JAX job has "
                    f"{placement.num_nodes}: start every process with one mpiexec")
            runtime.store.put(f"mpi/rank/{placement.node_id}", str(world.Get_rank()).encode())
            self._ranks = [int(runtime.store.get(f"mpi/rank/{n}",
                                                 runtime.rendezvous_timeout_s))
                           for n in range(placement.num_nodes)]
        return self._ranks

    def _make_comm(self, devices: tuple[int, ...], processes: tuple[int, ...]):
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        ranks = self._world_ranks(world)
        group = world.Get_group().Incl([ranks[p] for p in processes])
        # Groups made at once by different threads need different tags.
        tag = zlib.crc32(repr(devices).encode()) % 32768
        comm = world.Create_group(group, tag)
        group.Free()
        return comm

    def all_gather(self, devices: tuple[int, ...], processes: tuple[int, ...],
                   block: np.ndarray) -> Sequence[np.ndarray]:
        comm = self._comms.get(devices, processes)
        out = np.empty((len(processes), block.size), np.uint8)
        comm.Allgather(block, out)
        return list(out)

    def close(self) -> None:
        for comm in self._comms.take_all():
            try:
                comm.Free()
            except Exception:  # noqa: BLE001 - MPI may be finalized already
                pass
