"""One launch of a program over several devices: the rendezvous its collectives meet at, and
which device the current thread runs.

JAX gives every collective ``channel_handle = 1``, so a channel does not tell one collective
from another; each device counts the collectives it has run in this launch, and the n-th
collective of the devices of one group meets under the key ``(n, group)``.

No thread is left waiting: when a device fails (its kernel raised), ``fail`` wakes every
waiter, and they raise ``LaunchAborted``; a device whose program ends while another waits for
it at a collective it never reached fails the launch too (the devices disagree about the
program's collectives, which would otherwise wait forever).
"""
from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from pjrtkit.errors import Internal, PjrtError
from pjrtkit.kernel_threads import kernel_thread
from pjrtkit.switch_interval import short_switch_interval


class LaunchAborted(Exception):
    """Raised at a rendezvous of a launch that another device failed; the launch's error is
    the other device's, not this."""

    def __init__(self, error: PjrtError):
        super().__init__(error.message)
        self.error = error


@dataclasses.dataclass
class DeviceContext:
    """What the thread running one device of a launch knows about it."""

    launch: "Launch"
    position: int          # replica * num_partitions + partition: StableHLO's global id
    collectives_run: int = 0

    @property
    def replica(self) -> int:
        return self.position // self.launch.num_partitions

    @property
    def partition(self) -> int:
        return self.position % self.launch.num_partitions

    def next_ordinal(self) -> int:
        ordinal = self.collectives_run
        self.collectives_run += 1
        return ordinal

    def exchange(self, group: tuple[int, ...], payload: Any) -> list[Any]:
        """Every member's payload of this device's next collective, in ``group`` order.
        A group with devices of other processes meets through the launch's ``remote``
        (``pjrtkit.distributed.exchange``), which uses ``Launch.exchange`` for the devices
        of this process."""
        key = (self.next_ordinal(), group)
        remote = self.launch.remote
        if remote is not None and not remote.is_local(group):
            return remote.exchange(self.launch, key, group, self.position, payload)
        return self.launch.exchange(key, group, self.position, payload)

    def combine(self, group: tuple[int, ...], payload: Any,
                combine: Callable[[list[Any]], Any]) -> Any:
        """``combine(every member's payload in group order)`` for this device's next
        collective, computed once, by the member that arrives last, and the same object
        returned to every member (so it must never be written: a reduction's result is made
        read-only by its kernel). A group with devices of other processes is exchanged
        through the launch's ``remote`` and combined by each member of this process."""
        remote = self.launch.remote
        if remote is not None and not remote.is_local(group):
            return combine(self.exchange(group, payload))
        return self.launch.combine((self.next_ordinal(), group), group, self.position, payload,
                                   combine)


_current = threading.local()


def current_device() -> DeviceContext | None:
    """The device the calling thread runs in a launch over several devices; None otherwise
    (a program on one device: its replica and partition are 0)."""
    return getattr(_current, "device", None)


def set_current_device(context: DeviceContext | None) -> None:
    """Mark the calling thread as running ``context``'s device (a lockstep launch switches
    device between steps; ``running_as`` is the scoped form)."""
    _current.device = context


@contextlib.contextmanager
def running_as(context: DeviceContext | None):
    """Mark the calling thread as running ``context``'s device while the block runs."""
    previous = getattr(_current, "device", None)
    _current.device = context
    try:
        yield context
    finally:
        _current.device = previous


# A meeting's result before anyone combines, while one member does, after it raised.
_UNSET, _COMPUTING, _FAILED = object(), object(), object()


class _Meeting:
    __slots__ = ("values", "taken", "result")

    def __init__(self):
        self.values: dict[int, Any] = {}
        self.taken = 0
        self.result: Any = _UNSET  # ``Launch.combine``'s result


class Launch:
    """The rendezvous of one execution over ``num_replicas * num_partitions`` devices."""

    def __init__(self, name: str, num_replicas: int, num_partitions: int, remote: Any = None):
        self.name = name
        self.num_replicas = num_replicas
        self.num_partitions = num_partitions
        # Devices of other processes (a job under jax.distributed): None when every device of
        # the launch runs here. See pjrtkit.distributed.exchange.ProcessExchange.
        self.remote = remote
        self._condition = threading.Condition()
        self._meetings: dict[Any, _Meeting] = {}
        self._finished: set[int] = set()
        self.error: PjrtError | None = None
        # A lockstep launch's meetings of the current collective step (collectives/lockstep.py)
        self.lockstep_meetings: dict[Any, list] = {}
        self.lockstep_depositing = False

    def device(self, position: int) -> DeviceContext:
        return DeviceContext(self, position)

    def exchange(self, key, group: tuple[int, ...], position: int, payload: Any) -> list[Any]:
        """Every member's payload in group order, once all members deposited theirs."""
        with self._condition:
            meeting = self._meet(key, group, position, payload)
            values = [meeting.values[p] for p in group]
            self._leave(key, meeting, len(group))
            return values

    def combine(self, key, group: tuple[int, ...], position: int, payload: Any,
                combine: Callable[[list[Any]], Any]) -> Any:
        """``exchange``, but one member (the first to wake once all arrived) computes
        ``combine(values in group order)``, outside the lock, and every member gets that one
        result. If it raises, that member raises it (its runner fails the launch) and the
        others raise LaunchAborted with the launch's error."""
        with self._condition:
            meeting = self._meet(key, group, position, payload)
            computes = meeting.result is _UNSET
            if computes:
                meeting.result = _COMPUTING
                values = [meeting.values[p] for p in group]
        if computes:
            try:
                result = combine(values)
            except BaseException:
                with self._condition:
                    meeting.result = _FAILED
                    self._leave(key, meeting, len(group))
                    self._condition.notify_all()
                raise
            with self._condition:
                meeting.result = result
                self._leave(key, meeting, len(group))
                self._condition.notify_all()
                return result
        with self._condition:
            while meeting.result is _COMPUTING or (meeting.result is _FAILED
                                                   and self.error is None):
                if self.error is not None:
                    break
                self._condition.wait()
            self._leave(key, meeting, len(group))
            if self.error is not None or meeting.result is _FAILED:
                raise LaunchAborted(self.error)
            return meeting.result

    def _meet(self, key, group: tuple[int, ...], position: int, payload: Any) -> _Meeting:
        """Deposit ``payload`` and wait (lock held) until every member of ``group`` has."""
        if self.error is not None:
            raise LaunchAborted(self.error)
        meeting = self._meetings.get(key)
        if meeting is None:
            meeting = self._meetings[key] = _Meeting()
        meeting.values[position] = payload
        self._condition.notify_all()
        while len(meeting.values) < len(group):
            if self.error is not None:
                raise LaunchAborted(self.error)
            gone = [p for p in group if p not in meeting.values and p in self._finished]
            if gone:
                self._fail(Internal(
                    f"{self.name}: device {gone[0]} of the launch finished without joining "
                    f"collective #{key[0]} of group {list(group)}; the devices disagree "
                    f"about the program's collectives"))
                raise LaunchAborted(self.error)
            self._condition.wait()
        return meeting

    def _leave(self, key, meeting: _Meeting, members: int) -> None:
        """One member is done with the meeting (lock held); the last one removes it."""
        meeting.taken += 1
        if meeting.taken == members:
            del self._meetings[key]

    def fail(self, error: PjrtError) -> None:
        """Fail the launch with ``error`` (the first one wins); every waiter wakes and raises."""
        with self._condition:
            self._fail(error)

    def _fail(self, error: PjrtError) -> None:
        if self.error is None:
            self.error = error
        self._condition.notify_all()

    def finished(self, position: int) -> None:
        """The device at ``position`` ran its program to the end."""
        with self._condition:
            self._finished.add(position)
            self._condition.notify_all()


def launch_on_threads(name: str, num_replicas: int, num_partitions: int,
                      run_device: Callable[[int], Any],
                      error_of: Callable[[Exception], PjrtError], *,
                      positions: list[int] | None = None, remote: Any = None) -> list:
    """Run ``run_device(position)`` for every device of one launch, each on its own thread
    (the first on the calling one) marked as that device, and return their results in
    position order. A device that raises fails the launch: the others are released from any
    rendezvous, and the first failing device's error (``error_of(exception)``) is raised here.

    ``positions``: the devices this process runs (default: all); with devices in other
    processes, ``remote`` meets them (``pjrtkit.distributed.exchange``).
    """
    count = num_replicas * num_partitions
    positions = list(range(count)) if positions is None else list(positions)
    launch = Launch(name, num_replicas, num_partitions, remote)
    results: dict[int, Any] = {}

    def device_main(position: int) -> None:
        try:
            with running_as(launch.device(position)):
                results[position] = run_device(position)
            launch.finished(position)
        except LaunchAborted:
            pass  # another device failed first; its error is the launch's
        except Exception as exc:  # noqa: BLE001 - the launch's error, on every output
            launch.fail(error_of(exc))

    threads = [threading.Thread(target=kernel_thread(device_main), args=(position,), daemon=True,
                                name=f"pjrtkit-{name}-device{position}")
               for position in positions[1:]]
    # A device released from a rendezvous, or one whose NumPy call just returned, would wait up
    # to the default 5 ms for a device thread interpreting Python (pjrtkit.switch_interval).
    with short_switch_interval():
        for thread in threads:
            thread.start()
        device_main(positions[0])
        for thread in threads:
            thread.join()
    if launch.error is not None:
        raise launch.error
    return [results[position] for position in positions]
