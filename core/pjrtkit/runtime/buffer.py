"""Buffers: an array of a known shape and dtype in one memory space of one device.

The contents are the plugin's *payload* (opaque here). A buffer produced by an execution is
created pending and becomes ready (or failed) when its event completes.
"""
from __future__ import annotations

import math
import threading

import numpy as np

from pjrtkit.errors import FailedPrecondition, Internal, InvalidArgument, PjrtError
from pjrtkit.runtime.event import Event
from pjrtkit.semantics.dtypes import TOKEN


def count_allocations(requests) -> None:
    """Count every ``(memory, nbytes, (dtype, shape))`` of ``requests`` with
    ``memory.allocated``, or,
    when one is past a limit, none of them (the ResourceExhausted is re-raised)."""
    done = []
    try:
        for memory, nbytes, what in requests:
            memory.allocated(nbytes, what)
            done.append((memory, nbytes))
    except BaseException:
        for memory, nbytes in done:
            memory.freed(nbytes)
        raise


def in_layout(flat: np.ndarray, shape: tuple[int, ...], minor_to_major) -> np.ndarray:
    """A view of the dense memory ``flat`` as the logical array of ``shape`` laid out
    ``minor_to_major`` (None: row-major): writing the logical values through it puts them in
    that order."""
    if minor_to_major is None:
        return flat.reshape(shape)
    major_to_minor = tuple(reversed(minor_to_major))
    physical = flat.reshape(tuple(shape[d] for d in major_to_minor))
    return physical.transpose(np.argsort(major_to_minor))


class Buffer:
    # One lock for the state of all buffers (deleted, holds, external references): each
    # critical section is a few assignments and never takes another lock, and buffers are
    # made for every execution output, so a lock per buffer would cost more than it saves.
    _lock = threading.Lock()
    __slots__ = ("client", "dtype", "shape", "device", "memory", "payload", "ready", "nbytes",
                 "minor_to_major", "_counted", "_deleted", "_holds", "_external_refs",
                 "__weakref__")

    def __init__(self, client, dtype: np.dtype, shape: tuple[int, ...], device, memory,
                 payload=None, ready: Event | None = None, *, accounting: str = "count"):
        """``accounting``: "count" counts the buffer's bytes in ``memory`` now (raising
        ResourceExhausted, nothing made, past a limit); "counted": the caller already counted
        them with ``memory.allocated``; "empty": the buffer holds nothing (an error buffer)."""
        self.client = client
        self.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self.shape = shape if type(shape) is tuple else tuple(int(d) for d in shape)
        self.device = device
        self.memory = memory
        self.payload = payload
        self.ready = ready if ready is not None else Event.completed()
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        # The layout it was made with (``stablehlo.entry_layouts``), None for row-major: the
        # payload is the logical array either way; only host copies of bytes follow it.
        self.minor_to_major = None
        self._deleted = False
        self._holds = 0  # executions queued that will read the payload
        self._external_refs = 0
        if accounting == "count":
            memory.allocated(self.nbytes, (self.dtype, self.shape))
        self._counted = 0 if accounting == "empty" else self.nbytes

    @classmethod
    def computed(cls, client, dtype: np.dtype, shape: tuple[int, ...], nbytes: int, device,
                 memory, payload, ready: Event) -> "Buffer":
        """A buffer whose contents exist already (an inline execution's output): the same
        state ``__init__`` builds, from facts the caller computed once (``dtype`` a np.dtype,
        ``shape`` a tuple, ``nbytes`` their size, already counted with ``memory.allocated``)."""
        self = cls.__new__(cls)
        self.client = client
        self.dtype = dtype
        self.shape = shape
        self.device = device
        self.memory = memory
        self.payload = payload
        self.ready = ready
        self.nbytes = nbytes
        self.minor_to_major = None
        self._deleted = False
        self._holds = 0
        self._external_refs = 0
        self._counted = nbytes
        return self

    # -- state ------------------------------------------------------------------------------
    @property
    def on_device_size_in_bytes(self) -> int:
        return self.nbytes

    @property
    def is_deleted(self) -> bool:
        return self._deleted

    @property
    def is_on_cpu(self) -> bool:
        return False

    def _release(self) -> None:
        with self._lock:
            if self._deleted:
                return
            self._deleted = True
        self.memory.freed(self._counted)

    def delete(self) -> None:
        """Free the contents (now, or when the last queued execution reading them is done);
        the handle stays valid and reports is_deleted."""
        self._release()
        self.ready.on_ready(lambda _error: self._drop_if_unused())

    def _drop_if_unused(self) -> None:
        with self._lock:
            if self._deleted and self._holds == 0:
                self.payload = None

    def hold(self) -> "Buffer":
        """An execution will read the payload: keep it even if the buffer is deleted."""
        self.check_usable("used")
        with self._lock:
            self._holds += 1
        return self

    def unhold(self) -> None:
        with self._lock:
            self._holds -= 1
        self._drop_if_unused()

    def donate(self) -> "Buffer":
        """Give the contents to an execution: the buffer reads as deleted from now on, and the
        execution still reads the payload (it holds it)."""
        self.hold()
        self._release()
        return self

    def destroy(self) -> None:
        # delete() in one critical section when the contents are already final (every
        # execution output that jaxlib drops comes through here).
        if not self.ready._ready:  # noqa: SLF001 - Event is runtime's; no property on the hot path
            self.delete()
            return
        with self._lock:
            if self._deleted:
                released = False
            else:
                self._deleted = released = True
            if self._holds == 0:
                self.payload = None
        if released:
            self.memory.freed(self._counted)

    def check_usable(self, use: str) -> None:
        if self._deleted:
            raise FailedPrecondition(f"buffer {self.dtype.name}{list(self.shape)} on "
                                     f"{self.device.debug_string} cannot be {use}: it was "
                                     f"deleted or donated")

    def check_has_values(self, use: str) -> None:
        if self.dtype == TOKEN:
            raise InvalidArgument(f"a token buffer on {self.device.debug_string} cannot be {use}: "
                                  f"a token orders effects and has no values")

    # -- transfers --------------------------------------------------------------------------
    def to_host(self, dst, minor_to_major: tuple[int, ...] | None = None) -> Event:
        """Copy the contents into ``dst`` (a writable buffer of exactly nbytes) once ready, in
        the layout ``minor_to_major`` (None: row-major)."""
        self.check_usable("read")
        self.check_has_values("copied to host")
        view = memoryview(dst).cast("B")
        if view.nbytes != self.nbytes:
            raise InvalidArgument(f"destination has {view.nbytes} bytes, buffer "
                                  f"{self.dtype.name}{list(self.shape)} needs {self.nbytes}")

        def write(host: np.ndarray) -> None:
            out = np.frombuffer(view, dtype=self.dtype, count=math.prod(self.shape))
            np.copyto(in_layout(out, self.shape, minor_to_major), np.asarray(host),
                      casting="no")

        return self._when_read(write, "copying a buffer to host")

    def copy_raw_to_host(self, dst, offset: int, size: int) -> Event:
        """Copy bytes ``[offset, offset + size)`` of the contents, dense in the buffer's layout
        (row-major unless it was made with another), into ``dst`` (a writable buffer of
        ``size`` bytes) once ready."""
        self.check_usable("read")
        self.check_has_values("copied to host")
        if offset < 0 or size < 0 or offset + size > self.nbytes:
            raise InvalidArgument(f"raw copy of bytes [{offset}, {offset + size}) is outside "
                                  f"the {self.nbytes} bytes of buffer "
                                  f"{self.dtype.name}{list(self.shape)}")
        view = memoryview(dst).cast("B")

        def write(host: np.ndarray) -> None:
            dense = np.empty(self.nbytes, np.uint8).view(self.dtype)
            np.copyto(in_layout(dense, self.shape, self.minor_to_major), np.asarray(host),
                      casting="no")
            view[:size] = dense.view(np.uint8)[offset:offset + size].data

        return self._when_read(write, "copying raw bytes to host")

    def _when_read(self, write, what: str) -> Event:
        """Once the contents are ready, hand them (as the plugin's host array) to ``write``;
        the returned event completes after it, with the error if anything failed."""
        done = Event()

        def read(error):
            if error is None:
                try:
                    if self.payload is None:
                        raise FailedPrecondition("buffer was deleted before its contents were "
                                                 "read")
                    write(self.client.backend.transfer_to_host(
                        payload=self.payload, device=self.device.spec,
                        memory_kind=self.memory.kind))
                except PjrtError as exc:
                    error = exc
                except Exception as exc:  # noqa: BLE001 - any failure is the event's error
                    error = Internal(f"{what} failed: {type(exc).__name__}: {exc}")
            done.set(error)

        self.ready.on_ready(read)
        return done

    def copy_to_memory(self, memory, device=None) -> "Buffer":
        self.check_usable("copied")
        device = device or (memory.devices[0] if memory.devices else self.device)
        result = Buffer(self.client, self.dtype, self.shape, device, memory, ready=Event())
        result.minor_to_major = self.minor_to_major

        def copy(error):
            if error is not None:
                result.ready.set(error)
                return
            try:
                result.payload = self.client.backend.copy_buffer(
                    payload=self.payload, src_device=self.device.spec,
                    src_memory_kind=self.memory.kind, dst_device=device.spec,
                    dst_memory_kind=memory.kind)
            except PjrtError as exc:
                result.ready.set(exc)
                return
            result.ready.set()

        self.ready.on_ready(copy)
        return result

    def copy_to_device(self, device) -> "Buffer":
        return self.copy_to_memory(device.default_memory, device)

    # -- external references (zero-copy views held by the framework) -------------------------
    def increase_external_reference(self) -> None:
        with self._lock:
            self._external_refs += 1

    def decrease_external_reference(self) -> None:
        with self._lock:
            if self._external_refs == 0:
                raise InvalidArgument("decrease of the external reference count below zero")
            self._external_refs -= 1

    def unsafe_pointer(self) -> int:
        """The payload's address (``jax.Array.unsafe_buffer_pointer()``), once it is ready;
        the plugin gives it (``pjrtkit_buffer_address``)."""
        error = self.ready.wait()
        if error is not None:
            raise error
        payload = self.payload
        if payload is None:
            raise FailedPrecondition("buffer was deleted; it has no address")
        address = self.client.backend.buffer_address(  # UNIMPLEMENTED when it has none
            payload=payload, device=self.device.spec, memory_kind=self.memory.kind)
        return int(address)
