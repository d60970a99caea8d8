"""The client: one backend's live devices, memories, buffers and executables."""
from __future__ import annotations

import math

import numpy as np

from pjrtkit.distributed.placement import placement_from_options
from pjrtkit.distributed.runtime import ProcessRuntime
from pjrtkit.errors import InvalidArgument, PjrtError, host_out_of_memory
from pjrtkit.runtime import serialized_executable
from pjrtkit.runtime.buffer import Buffer
from pjrtkit.runtime.devices import Device, DeviceDescription, Memory  # noqa: F401 (re-export)
from pjrtkit.runtime.event import Event
from pjrtkit.runtime.executable import Executable, LoadedExecutable, load_and_compile
from pjrtkit.runtime.executor import Executor
from pjrtkit.runtime.memory_limits import MemoryPool, host_memory_bytes, per_device_limit
from pjrtkit.stablehlo import isolation


class Client:
    def __init__(self, backend, options: dict, *, store=None, process_state=None):
        self.backend = backend
        self.platform_name = backend.platform_name
        self.platform_version = backend.platform.version
        self.process_index = 0
        # A job of several processes (jax.distributed): pjrtkit.distributed.
        self.distributed: ProcessRuntime | None = None
        placement = placement_from_options(options, self.platform_name)
        if placement is not None:
            self.distributed = ProcessRuntime(self.platform_name, placement, store,
                                              backend.multi_process(), process_state)
            self.process_index = placement.node_id
        self._topology = backend.client_topology(options=options)
        if self.distributed is not None:
            self._topology = self.distributed.join(self._topology)
        self.devices: list[Device] = []
        self.memories: list[Memory] = []  # the addressable ones
        seen_ids = set()
        local_count = sum(1 for spec in self._topology.devices
                          if spec.process_index == self.process_index)
        # Host-backed memories (capacity None) of every device share one pool: the host's RAM.
        self.host_pool = MemoryPool(
            f"the host memory shared by the {local_count} device(s) of "
            f"{self.platform_name}", host_memory_bytes())
        user_limit = per_device_limit(backend.name)
        remote_memories = 0
        for spec in self._topology.devices:
            if spec.id in seen_ids:
                raise InvalidArgument(f"{self.platform_name}: device id {spec.id} appears twice "
                                      f"in the client topology")
            seen_ids.add(spec.id)
            local = spec.process_index == self.process_index
            memories = []
            for space in spec.memory_spaces:
                limit = space.capacity_bytes
                if user_limit is not None and space.kind == spec.default_memory_kind:
                    limit = user_limit if limit is None else min(limit, user_limit)
                if local:
                    memory = Memory(len(self.memories), space.kind, space.capacity_bytes,
                                    limit, self.host_pool if space.capacity_bytes is None
                                    else None)
                    self.memories.append(memory)
                else:  # another process's: described, never allocated in
                    remote_memories += 1
                    memory = Memory(-remote_memories, space.kind, space.capacity_bytes, limit)
                memories.append(memory)
            device = Device(self, spec, memories)
            for memory in memories:
                memory.devices.append(device)
            self.devices.append(device)
        self.addressable_devices = [d for d in self.devices if d.is_addressable]
        self._by_id = {d.id: d for d in self.devices}
        self._by_local_id = {d.local_hardware_id: d for d in self.addressable_devices}
        self.executor = Executor(self.platform_name)
        self._topology_description = None
        # The program parser's child warms up while the user's program gets to its first
        # compile (half a second of imports that the first compile would otherwise wait for).
        isolation.start_parser()

    # -- devices ---------------------------------------------------------------------------------
    def lookup_device(self, device_id: int) -> Device:
        try:
            return self._by_id[device_id]
        except KeyError:
            raise InvalidArgument(f"{self.platform_name}: no device with id {device_id}; ids are "
                                  f"{sorted(self._by_id)}") from None

    def lookup_addressable_device(self, local_hardware_id: int) -> Device:
        try:
            return self._by_local_id[local_hardware_id]
        except KeyError:
            raise InvalidArgument(f"{self.platform_name}: no addressable device with local "
                                  f"hardware id {local_hardware_id}; ids are "
                                  f"{sorted(self._by_local_id)}") from None

    @property
    def topology(self):
        if self._topology_description is None:
            from pjrtkit.runtime.topology import TopologyDescription
            self._topology_description = TopologyDescription(self.backend, self._topology)
        return self._topology_description

    # -- buffers ---------------------------------------------------------------------------------
    def _placement(self, device, memory):
        if device is None and memory is None:
            raise InvalidArgument("a buffer needs a device or a memory")
        if memory is None:
            memory = device.default_memory
        if device is None:
            device = memory.devices[0]
        if memory not in device.memories:
            raise InvalidArgument(f"memory {memory.debug_string} is not attached to device "
                                  f"{device.debug_string}")
        return device, memory

    def buffer_from_host(self, array: np.ndarray, *, device=None, memory=None) -> Buffer:
        device, memory = self._placement(device, memory)
        # Counted before the plugin copies anything: past a limit nothing is allocated.
        memory.allocated(array.nbytes, (array.dtype, array.shape))
        try:
            payload = self.backend.transfer_to_device(array=array, device=device.spec,
                                                      memory_kind=memory.kind)
            return Buffer(self, array.dtype, array.shape, device, memory, payload=payload,
                          accounting="counted")
        except BaseException:
            memory.freed(array.nbytes)
            raise

    def check_room(self, shape, dtype, *, device=None, memory=None) -> None:
        """RESOURCE_EXHAUSTED now, when a ``dtype[shape]`` buffer would not fit where it is
        going: the ABI asks before it reads a caller's host data of that size."""
        device, memory = self._placement(device, memory)
        dtype = np.dtype(dtype)
        memory.check_room(math.prod(int(d) for d in shape) * dtype.itemsize, (dtype, shape))

    def create_uninitialized_buffer(self, shape, dtype, *, device=None, memory=None) -> Buffer:
        device, memory = self._placement(device, memory)
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
        memory.check_room(math.prod(shape) * dtype.itemsize, (dtype, shape))  # before NumPy
        try:
            array = np.zeros(shape, dtype=dtype)
        except MemoryError as exc:
            raise host_out_of_memory(exc, f"{self.platform_name}: creating an uninitialized "
                                          f"{dtype.name}{list(shape)} buffer") from None
        return self.buffer_from_host(array, device=device, memory=memory)

    def create_error_buffer(self, error: PjrtError, shape, dtype, *, memory) -> Buffer:
        device, memory = self._placement(None, memory)
        return Buffer(self, dtype, shape, device, memory, ready=Event.completed(error),
                      accounting="empty")

    def default_device_assignment(self, num_replicas: int, num_partitions: int
                                  ) -> list[list[int]]:
        """[replica][partition] -> device id, as XLA's ComputationPlacer assigns them:
        replica r of partition p runs on addressable device ``p * num_replicas + r``."""
        count = num_replicas * num_partitions
        if num_replicas < 1 or num_partitions < 1 or count > len(self.addressable_devices):
            raise InvalidArgument(f"{self.platform_name}: no device assignment for "
                                  f"{num_replicas} replica(s) x {num_partitions} partition(s) "
                                  f"on {len(self.addressable_devices)} device(s)")
        return [[self.addressable_devices[p * num_replicas + r].id
                 for p in range(num_partitions)] for r in range(num_replicas)]

    # -- executables -----------------------------------------------------------------------------
    def _assigned_devices(self, options) -> list[Device]:
        if options.num_partitions * options.num_replicas > 1 and options.device_assignment is None:
            count = options.num_partitions * options.num_replicas
            return self.addressable_devices[:count]
        if options.device_assignment is None:
            return self.addressable_devices[:1]
        return [self.lookup_device(i) for row in options.device_assignment for i in row]

    def compile(self, code: bytes, fmt: str, compile_options: bytes) -> LoadedExecutable:
        # A client of several devices that compiles: the child readies XLA's partitioner
        # meanwhile (a third of a second the first sharded compile would wait for; once).
        isolation.warm_partitioner(len(self.addressable_devices))
        holder = {}

        def specs_for(options):
            holder["devices"] = self._assigned_devices(options)
            return [d.spec for d in holder["devices"]]

        executable = load_and_compile(self.backend, code, fmt, compile_options, specs_for)
        return LoadedExecutable(self, executable, holder["devices"])

    def load(self, executable: Executable) -> LoadedExecutable:
        return LoadedExecutable(self, executable, self._assigned_devices(executable.options))

    def deserialize_executable(self, data: bytes, compile_options: bytes | None = None):
        """Load a serialized executable: its program is compiled again (in the parser child
        process); nothing in ``data`` is run (``serialized_executable``)."""
        code, options, fingerprint = serialized_executable.unpack(data, self.platform_name)
        loaded = self.compile(code, "mlir", compile_options if compile_options else options)
        if not compile_options:
            serialized_executable.check_fingerprint(fingerprint,
                                                    loaded.executable.fingerprint, data)
        return loaded

    def destroy(self) -> None:
        self.executor.shutdown()
        if self.distributed is not None:
            self.distributed.close()
