"""Collectives whose group spans processes: the seam between "the devices of this process
meet" (``pjrtkit.collectives.launch``) and "processes meet through an engine" (``engines``).

A collective kernel calls ``DeviceContext.exchange(group, payload)`` and gets every member's
payload in group order, whether the members run here or not. For a group with devices of other
processes the launch hands the call to ``ProcessExchange.exchange``:

1. the group's devices of this process meet at the launch's own rendezvous
   (``Launch.exchange`` over the local members only);
2. the first local member (the leader) packs their payloads into one byte block and the
   engine all-gathers the blocks of the group's processes (the engine's communicator for that
   group of devices, made at first use through the key-value store; array data goes through
   the engine, never the store);
3. the leader hands every member's payload, decoded, to the local members through a second
   local meeting.

Every process then holds every member's operands and the collective's rule computes its result
as it does inside one process (same fold order, XLA's types), so results are identical in every
process and equal to a single process with as many devices. An engine failure fails the launch
with an error naming the lost process (``liveness``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pjrtkit.errors import Internal

_RESULT = "result"


def _arrays(payload: Any) -> tuple[np.ndarray, ...]:
    items = payload if isinstance(payload, tuple) else (payload,)
    return tuple(np.asarray(item) for item in items)


def _pack(payloads: Sequence[Any]) -> np.ndarray:
    parts = [np.ascontiguousarray(a).reshape(-1).view(np.uint8)
             for payload in payloads for a in _arrays(payload)]
    return np.concatenate(parts) if parts else np.zeros(0, np.uint8)


class _Layout:
    """How one member's payload lies in a block: the shapes and dtypes of this device's own
    payload (every member of a group runs the same program, so they agree)."""

    def __init__(self, template: Any):
        self.is_tuple = isinstance(template, tuple)
        arrays = _arrays(template)
        self.parts = [(a.dtype, a.shape, a.nbytes) for a in arrays]
        self.nbytes = sum(n for _, _, n in self.parts)

    def unpack(self, block: np.ndarray, count: int) -> list[Any]:
        out, offset = [], 0
        for _ in range(count):
            arrays = []
            for dtype, shape, nbytes in self.parts:
                arrays.append(block[offset:offset + nbytes].view(dtype).reshape(shape).copy())
                offset += nbytes
            out.append(tuple(arrays) if self.is_tuple else arrays[0])
        return out


class ProcessExchange:
    """The launches of one loaded executable whose devices are in several processes.

    ``device_ids[position]`` is the global id of the device at each position of the device
    assignment and ``process_of[position]`` its process; ``node_id`` is this process."""

    def __init__(self, runtime, device_ids: Sequence[int], process_of: Sequence[int]):
        self.runtime = runtime
        self.node_id = runtime.placement.node_id
        self.device_ids = tuple(device_ids)
        self.process_of = tuple(process_of)
        self.local_positions = frozenset(
            p for p, node in enumerate(self.process_of) if node == self.node_id)

    def is_local(self, group: tuple[int, ...]) -> bool:
        return all(p in self.local_positions for p in group)

    def exchange(self, launch, key, group: tuple[int, ...], position: int,
                 payload: Any) -> list[Any]:
        local = tuple(p for p in group if p in self.local_positions)
        payloads = launch.exchange((key, "local"), local, position, payload)
        if position != local[0]:
            return launch.exchange((key, _RESULT), local, position, None)[0]
        try:
            everything = self._across_processes(key, group, local, payloads)
        except Exception as exc:
            error = self.runtime.collective_error(exc, launch.name, self._processes(group))
            launch.fail(error)
            raise error from exc
        launch.exchange((key, _RESULT), local, position, everything)
        return everything

    def _processes(self, group: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted({self.process_of[p] for p in group}))

    def _across_processes(self, key, group, local, payloads) -> list[Any]:
        processes = self._processes(group)
        layout = _Layout(payloads[0])
        members = {node: [p for p in group if self.process_of[p] == node] for node in processes}
        width = max(len(m) for m in members.values()) * layout.nbytes
        block = np.zeros(width, np.uint8)
        packed = _pack(payloads)
        if packed.size != len(local) * layout.nbytes:
            raise Internal(f"collective #{key[0]}: the devices of process {self.node_id} hold "
                           f"operands of different sizes")
        block[:packed.size] = packed
        if width:
            blocks = self.runtime.engine().all_gather(
                tuple(self.device_ids[p] for p in group), processes, block)
        else:  # nothing to move (empty operands): every process knows it
            blocks = [block] * len(processes)
        by_position = {}
        for node, received in zip(processes, blocks):
            if node == self.node_id:
                values = list(payloads)
            else:
                values = layout.unpack(np.asarray(received, np.uint8), len(members[node]))
            by_position.update(zip(members[node], values))
        return [by_position[p] for p in group]
