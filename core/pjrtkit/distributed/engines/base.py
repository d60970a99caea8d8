"""The one interface every collective engine implements, and how the engine is chosen.

An engine moves bytes between the processes of one group of devices: ``all_gather`` of one
equal-sized block per process. It sets itself up through the job's key-value store (the only
channel every PJRT host provides: ranks, addresses, unique ids) and moves the data itself.
"""
from __future__ import annotations

import abc
import importlib.util
import threading
from collections.abc import Sequence

import numpy as np

from pjrtkit.errors import FailedPrecondition
from pjrtkit.settings import seconds_setting

ENGINE_TIMEOUT_VARIABLE = "PJRTKIT_COLLECTIVES_TIMEOUT_S"
# gloo's own default: an operation that waits longer than this fails.
DEFAULT_ENGINE_TIMEOUT_S = 1800.0


class EngineUnavailable(FailedPrecondition):
    """The engine cannot run here (its package is missing, no driver, no launcher)."""


class CollectiveEngine(abc.ABC):
    """Engine ``name`` for the processes of one client (``runtime``: placement, store,
    timeouts)."""

    name: str = ""
    # What `pip install` brings the engine (for messages).
    extra: str = ""

    def __init__(self, runtime):
        self.runtime = runtime

    @classmethod
    @abc.abstractmethod
    def problem(cls) -> str | None:
        """Why the engine cannot run in this process, or None when it can (cheap: no import
        of the engine's package)."""

    @classmethod  # noqa: B027 - optional: nothing to import by default
    def prepare(cls) -> None:
        """Import what the engine needs (run on a thread when the client is made, so the first
        collective does not import a large package inside a launch)."""
        return None

    @classmethod
    def chosen_automatically(cls) -> bool:
        """Whether ``PJRTKIT_COLLECTIVES`` unset may pick this engine here."""
        return cls.problem() is None

    @abc.abstractmethod
    def all_gather(self, devices: tuple[int, ...], processes: tuple[int, ...],
                   block: np.ndarray) -> Sequence[np.ndarray]:
        """Every process's ``block`` (uint8, equal sizes), in ``processes`` order. ``devices``
        (global device ids) names the group: each group has its own communicator, so
        collectives of different groups may run at once. Raises on a lost peer."""

    def close(self) -> None:  # noqa: B027 - optional: engines without communicators
        """Release communicators (the client is destroyed)."""


class Communicators:
    """An engine's communicators, one per group of devices, each made once by ``make`` at its
    first use. Groups are made independently: a process may be making two at once (two of its
    devices in different groups), and its peers may make them in another order, so no lock is
    held across ``make`` for more than its own group."""

    def __init__(self, make):
        self._make = make
        self._lock = threading.Lock()
        self._slots: dict[tuple[int, ...], list] = {}  # devices -> [lock, communicator]

    def get(self, devices: tuple[int, ...], processes: tuple[int, ...]):
        with self._lock:
            slot = self._slots.setdefault(devices, [threading.Lock(), None])
        with slot[0]:
            if slot[1] is None:
                slot[1] = self._make(devices, processes)
            return slot[1]

    def take_all(self) -> list:
        with self._lock:
            slots, self._slots = self._slots, {}
        return [comm for _, comm in slots.values() if comm is not None]


def engine_timeout_s() -> float:
    """How long one engine operation may wait (``PJRTKIT_COLLECTIVES_TIMEOUT_S``)."""
    return seconds_setting(ENGINE_TIMEOUT_VARIABLE, DEFAULT_ENGINE_TIMEOUT_S)


def module_missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True
