"""A fuzz harness over the C ABI: every PJRT_* function of a pjrtkit backend's PJRT_Api, called
through its function pointer with Args that hypothesis draws.

The property under test: every call returns (nothing aborts or hangs), and every failure is a
PJRT_Error whose code says what the caller did wrong (INVALID_ARGUMENT, FAILED_PRECONDITION,
RESOURCE_EXHAUSTED, UNIMPLEMENTED, ...). INTERNAL or UNKNOWN means pjrtkit itself failed (an
exception it did not expect): a bug. So is a function that must never fail (a destroy) logging
a failure.

Targets:
  args       one call of a random function with random Args: struct_size 0, too small, exact,
             larger (a newer header) or huge; each handle field NULL, valid, a handle of another
             kind or a destroyed one; counts and sizes at their boundaries with arrays of that
             many elements (NULL when absurd); dims and strides negative, zero, huge, overflowing
             int64 products; enum values out of range; nested structs (options, layouts,
             programs, named values) filled the same way
  lifetimes  sequences of operations on fresh buffers, events and errors: use after destroy,
             double destroy, events awaited and OnReady'd after destroy, buffers deleted while
             an execution reads them

What is not drawn, because no C library can check it: non-NULL pointers to nothing (garbage
addresses), and arrays shorter than the count next to them. A destroyed handle's struct is kept
alive by the harness (as a caller's stale pointer into still-mapped memory would be), so its
tag reads "destroyed". Host data is a 64 MiB arena and the children run with
``PJRTKIT_CPU_MEMORY_LIMIT=64M``, so any host read or write pjrtkit accepts stays inside it.

Cases run in child processes (``fuzz_children``): an abort is counted, not fatal. Run
``python -m pjrtkit_tools.fuzz_abi --cases 10000`` (``make fuzz``; ``FUZZ_CASES=500`` is CI's).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

import numpy as np

from pjrtkit_tools.fuzz_children import run_campaigns, run_in_children, summarize

TARGETS = ("args", "lifetimes")
ARENA_BYTES = 64 << 20

_INTS = [0, 1, 2, 3, 7, 8, 64, 255, 256, 4096, -1, -2, 2**31 - 1, -2**31, 2**32, 2**62,
         2**63 - 1, -2**63]
_SIZES = [0, 1, 2, 3, 4, 8, 16, 64, 256, 257, 4096, 2**31, 2**40, 2**63 - 1, 2**64 - 1]
# Handles kept out of the pool of valid inputs: using them would end the campaign's own
# objects (the client) or wait forever (an event nothing will complete).
_DESTROYS_NOTHING_OF_OURS = ("PJRT_Client_Destroy", "PJRT_TopologyDescription_Destroy",
                             "PJRT_Executable_Destroy", "PJRT_LoadedExecutable_Destroy",
                             "PJRT_LoadedExecutable_Delete", "PJRT_ExecuteContext_Destroy")
_GOOD_CODES = {"INVALID_ARGUMENT", "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED", "UNIMPLEMENTED",
               "OUT_OF_RANGE", "NOT_FOUND", "ALREADY_EXISTS", "CANCELLED", "DEADLINE_EXCEEDED",
               "UNAVAILABLE", "ABORTED", "PERMISSION_DENIED", "DATA_LOSS"}


class _FailureLog(logging.Handler):
    """Collects what pjrtkit logs when a never-failing function fails (its only report)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        from pjrtkit.errors import PjrtError

        exc = record.exc_info[1] if record.exc_info else None
        # A never-failing function given a bad handle can only log the caller's mistake (a
        # PjrtError); any other exception is pjrtkit failing.
        if not isinstance(exc, PjrtError):
            self.records.append(record.getMessage())


class Pool:
    """The objects the cases draw handles from, made once per child through the ABI."""

    def __init__(self, backend_name: str = "cpu"):
        from pjrtkit.abi._cffi import ffi, lib
        from pjrtkit.discovery import load_backend
        from pjrtkit.conformance.abi_driver import AbiDriver

        self.ffi, self.lib = ffi, lib
        self.driver = d = AbiDriver.from_backend(load_backend(backend_name))
        d.initialize()
        self.arena = ffi.new("char[]", ARENA_BYTES)
        self.client = d.client
        device = d.device()
        self.loaded = d.compile(lambda x: x + 1.0, np.zeros(4, np.float32))
        self.executable = d.executable_of(self.loaded)
        self.program_code = d.artifact(lambda x: x + 1.0, np.zeros(4, np.float32))
        self.compile_options = d.compile_options()
        outputs, events = d.execute(self.loaded, [[d.put(np.ones(4, np.float32))]], 1)
        self.valid: dict[str, list[Any]] = {
            "PJRT_Client": [self.client],
            "PJRT_Device": d.devices(),
            "PJRT_DeviceDescription": [d.description(x) for x in d.devices()],
            "PJRT_Memory": d.device_memories(device),
            "PJRT_Buffer": [d.put(np.arange(4, dtype=np.float32)),
                            d.put(np.arange(6, dtype=np.int32).reshape(2, 3)),
                            d.put(np.zeros((0, 3), np.float32)), d.put(np.float64(2.5)),
                            outputs[0][0]],
            "PJRT_Event": [e for e in events if e != ffi.NULL],
            "PJRT_Executable": [self.executable],
            "PJRT_LoadedExecutable": [self.loaded],
            "PJRT_TopologyDescription": [d.call("PJRT_Client_TopologyDescription",
                                                client=self.client).topology],
            "PJRT_Error": [self.new_error()],
        }
        self.destroyed: dict[str, list[Any]] = {"PJRT_Buffer": [], "PJRT_Event": [],
                                                "PJRT_Error": []}
        self._kept: list[Any] = []  # Refs of destroyed handles: their structs stay mapped
        for _ in range(2):
            self.destroyed["PJRT_Buffer"].append(self.destroy(self.fresh_buffer(), "Buffer"))
            self.destroyed["PJRT_Error"].append(self.destroy(self.new_error(), "Error"))
        self.all_handles = [h for hs in self.valid.values() for h in hs]
        self.callbacks = {}
        self.failures = _FailureLog()
        logging.getLogger("pjrtkit").addHandler(self.failures)

    # -- making and destroying -------------------------------------------------------------
    def new_error(self) -> Any:
        """A PJRT_Error handle from a failing call (not read, not destroyed)."""
        d = self.driver
        args = d.new_args("PJRT_Client_LookupDevice", client=self.client, id=-12345)
        return d.function("PJRT_Client_LookupDevice")(args)

    def fresh_buffer(self, length: int = 4) -> Any:
        """A new f32[length] buffer (f32[4] is what the pool's program takes)."""
        d = self.driver
        args = d.new_args("PJRT_Client_BufferFromHostBuffer", client=self.client,
                          data=self.arena, type=11, dims=self.ffi.new("int64_t[]", [length]),
                          num_dims=1, device=d.device(),
                          host_buffer_semantics=0)
        d.invoke("PJRT_Client_BufferFromHostBuffer", args)
        self.release(args.done_with_host_buffer, "Event")
        return args.buffer

    def release(self, handle: Any, kind: str) -> None:
        if handle != self.ffi.NULL:
            field = "error" if kind == "Error" else kind.lower()
            self.driver.function(f"PJRT_{kind}_Destroy")(
                self.driver.new_args(f"PJRT_{kind}_Destroy", **{field: handle}))

    def destroy(self, handle: Any, kind: str) -> Any:
        """Destroy ``handle`` but keep its struct mapped; returns the now dead pointer."""
        self.keep_mapped(handle)
        self.release(handle, kind)
        return handle

    def keep_mapped(self, handle: Any) -> None:
        """Keep ``handle``'s struct mapped after its destroy (the module docstring). A buffer C
        made that Python has no object for yet (a host transfer or an output of the C execute
        path) is adopted first: C frees the struct of a buffer it still owns at its destroy,
        and a pointer to freed memory is the garbage address this harness does not draw."""
        ffi = self.ffi
        if handle == ffi.NULL:
            return
        head = ffi.cast("pjrtkit_head*", handle)
        if head.ref == ffi.NULL and head.kind == self.lib.PJRTKIT_KIND_BUFFER \
                and ffi.cast("pjrtkit_buffer*", handle).native == 1:
            from pjrtkit.abi import native

            native.adopt(handle)
        if head.ref != ffi.NULL:
            self._kept.append(ffi.from_handle(head.ref))

    # -- drawing ---------------------------------------------------------------------------
    def handle(self, draw, st, type_name: str) -> Any:
        """NULL, a valid handle of ``type_name``, one of another kind, or a destroyed one."""
        choices = ["null", "valid", "wrong_kind"]
        if self.destroyed.get(type_name):
            choices.append("destroyed")
        choice = draw(st.sampled_from(choices))
        found = self.ffi.NULL
        if choice == "valid" and self.valid.get(type_name):
            found = draw(st.sampled_from(self.valid[type_name]))
        elif choice == "destroyed":
            found = draw(st.sampled_from(self.destroyed[type_name]))
        elif choice == "wrong_kind":
            others = [h for t, hs in self.valid.items() if t != type_name for h in hs]
            found = draw(st.sampled_from(others))
        return self.ffi.cast(f"struct {type_name} *", found)

    def callback(self, ctype: Any) -> Any:
        """A harmless C callback of function-pointer type ``ctype`` (kept alive)."""
        key = ctype.cname
        if key not in self.callbacks:
            returns_pointer = ctype.result.kind == "pointer"
            ffi = self.ffi

            def harmless(*_args):
                return ffi.NULL if returns_pointer else None

            self.callbacks[key] = self.ffi.callback(ctype, harmless)
        return self.callbacks[key]


# -- filling Args structs -----------------------------------------------------------------
def _opaque(ffi, ctype: Any) -> bool:
    """A struct declared but not defined: a handle type (PJRT_SerializedExecutable, ...)."""
    try:
        ffi.sizeof(ctype)
    except (ValueError, ffi.error):
        return True
    return False


def _count_fields(fields: list[tuple[str, Any]]) -> dict[str, str]:
    """pointer field -> the integer field that says how many elements it has."""
    names = {name for name, _ in fields}
    counts = {}
    for name, field in fields:
        if field.type.kind != "pointer":
            continue
        stem = name[:-1] if name.endswith("s") else name
        for candidate in (f"num_{name}", f"{name}_size", f"num_{stem}s", f"{stem}_size",
                          f"num_{stem}"):
            if candidate in names:
                counts[name] = candidate
                break
    special = {"argument_lists": "num_args", "output_lists": "num_args",
               "device_complete_events": "num_devices", "create_options": "num_options",
               "dims": "num_dims", "shape_dims": "shape_num_dims", "code": "code_size",
               "format": "format_size"}
    for pointer, count in special.items():
        if pointer in names and count in names:
            counts[pointer] = count
    return counts


class Filler:
    """Draws every field of an Args struct (and of the structs it points to)."""

    def __init__(self, pool: Pool, draw, st):
        self.pool, self.draw, self.st = pool, draw, st
        self.ffi = pool.ffi
        self.keep: list[Any] = []  # arrays and structs the call reads: alive until it returns

    def integer(self, ctype: Any) -> int:
        st = self.st
        if ctype.cname in ("_Bool", "bool"):
            return self.draw(st.booleans())
        unsigned = self.ffi.cast(ctype, -1) > 0
        bits = 8 * self.ffi.sizeof(ctype)
        low, high = (0, 2**bits - 1) if unsigned else (-2**(bits - 1), 2**(bits - 1) - 1)
        values = [v for v in _SIZES + _INTS if low <= v <= high]
        return self.draw(st.one_of(st.sampled_from(values), st.integers(low, high)))

    def struct(self, ctype: Any, depth: int) -> Any:
        """A new struct of ``ctype`` with every field drawn; struct_size drawn around its own."""
        value = self.ffi.new(f"{ctype.cname} *")
        self.keep.append(value)
        self.fill(value, ctype, depth)
        return value

    def fill(self, value: Any, ctype: Any, depth: int) -> None:
        fields = list(ctype.fields)
        counts = _count_fields(fields)
        drawn: dict[str, int] = {}
        for name, field in fields:  # integers first: the arrays are sized by them
            t = field.type
            if name == "struct_size":
                exact = self.ffi.sizeof(ctype)
                size = self.draw(self.st.sampled_from(
                    [exact] * 6 + [0, 1, 8, max(exact - 8, 0), exact + 64, 1 << 20, 2**63]))
                setattr(value, name, size)
            elif t.kind == "primitive":
                drawn[name] = self.integer(t)
                setattr(value, name, drawn[name])
            elif t.kind == "enum":
                drawn[name] = self.draw(self.st.one_of(
                    self.st.integers(0, 40), self.st.sampled_from([-1, 2**31 - 1, -2**31])))
                try:
                    setattr(value, name, drawn[name])
                except OverflowError:  # an enum C made unsigned
                    setattr(value, name, drawn[name] & 0xFFFFFFFF)
        for name, field in fields:
            t = field.type
            if t.kind == "pointer" and name != "extension_start":
                count = drawn.get(counts.get(name, ""), None)
                setattr(value, name, self.pointer(name, t, count, depth))
            elif t.kind == "function":
                setattr(value, name, self.ffi.NULL)
            elif t.kind == "struct" and depth < 2:
                self.fill(getattr(value, name), t, depth + 1)

    def pointer(self, name: str, t: Any, count: int | None, depth: int) -> Any:
        ffi, st, draw = self.ffi, self.st, self.draw
        item = t.item
        if item.kind == "function":
            return draw(st.sampled_from([ffi.NULL, self.pool.callback(t)]))
        if name in ("data", "dst", "user_arg") or item.cname == "void":
            return draw(st.sampled_from([ffi.NULL, self.pool.arena]))
        if item.kind == "struct" and (item.cname[7:] in self.pool.valid or _opaque(ffi, item)):
            return self.pool.handle(draw, st, item.cname[7:])
        if item.kind == "struct" and item.cname == "struct PJRT_Program" and draw(st.booleans()):
            return self._program()
        length = 1 if count is None else count
        if draw(st.sampled_from([False] * 9 + [True])) or length < 0 or length > 256:
            return ffi.NULL
        length = max(length, 1)
        if item.kind == "pointer" and item.item.kind == "pointer":  # e.g. argument_lists
            lists = ffi.new(f"{item.cname}[]", 8)
            for i in range(8):
                lists[i] = self.pointer(name, item, max(length, 64), depth)
            self.keep.append(lists)
            return lists
        array = ffi.new(f"{item.cname}[]", max(length, 64) if item.kind == "pointer" else length)
        self.keep.append(array)
        if item.kind == "primitive":
            if item.cname == "char":
                raw = draw(st.binary(min_size=min(length, 16), max_size=min(length, 16)))
                ffi.memmove(array, raw, len(raw))
            else:
                for i in range(min(length, 16)):
                    array[i] = self.integer(item)
        elif item.kind == "pointer" and item.item.kind == "struct" and (
                item.item.cname[7:] in self.pool.valid or _opaque(ffi, item.item)):
            for i in range(min(length, 16)):
                array[i] = self.pool.handle(draw, st, item.item.cname[7:])
        elif item.kind == "struct" and depth < 2:
            for i in range(min(length, 4)):
                self.fill(array[i], item, depth + 1)
        return array

    def _program(self) -> Any:
        program = self.ffi.new("PJRT_Program*")
        program.struct_size = self.ffi.sizeof("PJRT_Program")
        code = self.ffi.new("char[]", self.pool.program_code)
        fmt = self.ffi.new("char[]", b"mlir")
        program.code, program.code_size = code, len(self.pool.program_code)
        program.format, program.format_size = fmt, 4
        self.keep += [program, code, fmt]
        return program


# -- the cases ----------------------------------------------------------------------------
def _functions(pool: Pool) -> list[str]:
    from pjrtkit.abi.errors import REGISTERED

    return sorted(name for name in REGISTERED if pool.driver.has(name))


def _classify(pool: Pool, error: Any, logged_before: int) -> str:
    logged = pool.failures.records[logged_before:]
    if logged:
        return f"bug:logged {logged[0][:200]}"
    if error is None:
        return "ok"
    code = error.code.name
    if code in _GOOD_CODES:
        return f"error:{code}"
    return f"bug:{code}: {str(error)[:200]}"


def args_case(pool: Pool, draw, st, record) -> str:
    ffi = pool.ffi
    name = draw(st.sampled_from(_functions(pool)))
    ctype = ffi.typeof(f"{name}_Args")
    filler = Filler(pool, draw, st)
    if draw(st.sampled_from([False] * 30 + [True])):
        record(name, "NULL Args")
        args = ffi.NULL
    else:
        args = filler.struct(ctype, 0)
    is_destroy = name.endswith(("_Destroy", "_Delete"))
    if is_destroy and args != ffi.NULL and name not in _DESTROYS_NOTHING_OF_OURS:
        # Destroy something made for this case, or a bad handle: never the pool's objects.
        kind = name[len("PJRT_"):].rsplit("_", 1)[0]
        field = [f for f, _ in ctype.fields if f not in ("struct_size", "extension_start")][0]
        victim = draw(st.sampled_from(["fresh", "null", "destroyed"]))
        if victim == "fresh" and kind == "Buffer":
            setattr(args, field, pool.fresh_buffer())
        elif victim == "fresh" and kind == "Error":
            setattr(args, field, ffi.cast("PJRT_Error*", pool.new_error()))
        elif victim == "destroyed" and pool.destroyed.get(f"PJRT_{kind}"):
            setattr(args, field, draw(st.sampled_from(pool.destroyed[f"PJRT_{kind}"])))
        else:
            setattr(args, field, ffi.NULL)
    elif is_destroy and args != ffi.NULL:
        for f, t in ctype.fields:
            if t.type.kind == "pointer" and f != "extension_start":
                bad = draw(st.sampled_from([ffi.NULL, *pool.destroyed["PJRT_Buffer"]]))
                setattr(args, f, ffi.cast(t.type, bad))
    if args != ffi.NULL:
        record(name, _describe(args, ctype))
    before = len(pool.failures.records)
    returned = pool.driver.function(name)(args)  # None from the functions C declares void
    error = None if returned is None else pool.driver.take_error(returned)
    outcome = _classify(pool, error, before)
    if args != ffi.NULL and error is None:
        _release_outputs(pool, args, ctype)
    return outcome


def _describe(args: Any, ctype: Any) -> str:
    parts = []
    for name, field in ctype.fields:
        if field.type.kind in ("primitive", "enum"):
            parts.append(f"{name}={getattr(args, name)}")
        elif field.type.kind == "pointer":
            parts.append(f"{name}={'NULL' if not getattr(args, name) else '*'}")
    return " ".join(parts)[:400]


def _release_outputs(pool: Pool, args: Any, ctype: Any) -> None:
    """Destroy what a successful call handed out (buffers, events, executables), so the
    campaign's memory stays bounded."""
    ffi = pool.ffi
    known = {int(ffi.cast("uintptr_t", h)) for h in pool.all_handles}
    for name, field in ctype.fields:
        t = field.type
        if t.kind != "pointer" or t.item.kind != "struct":
            continue
        kind = t.item.cname[len("struct PJRT_"):]
        if kind not in ("Buffer", "Event", "LoadedExecutable", "Executable"):
            continue
        handle = getattr(args, name)
        if handle == ffi.NULL or int(ffi.cast("uintptr_t", handle)) in known:
            continue
        head = ffi.cast("pjrtkit_head*", handle)
        if head.kind != 0:
            field_name = {"LoadedExecutable": "executable", "Executable": "executable"}.get(
                kind, kind.lower())
            pool.driver.function(f"PJRT_{kind}_Destroy")(
                pool.driver.new_args(f"PJRT_{kind}_Destroy", **{field_name: handle}))


def lifetimes_case(pool: Pool, draw, st, record) -> str:
    """A sequence of operations on fresh objects; the first non-ok outcome that is a bug."""
    ffi, d = pool.ffi, pool.driver
    buffers: list[Any] = []
    events: list[Any] = []
    errors: list[Any] = []
    steps = draw(st.lists(st.sampled_from([
        "new_buffer", "destroy_buffer", "delete_buffer", "read_buffer", "dims_buffer",
        "execute", "await_event", "on_ready_event", "destroy_event", "new_error",
        "destroy_error", "error_message", "to_host_event", "copy_buffer"]),
        min_size=1, max_size=12))
    steps = ["new_buffer", "execute", "new_error", *steps]  # something to act on

    def pick(handles: list) -> Any:
        return draw(st.sampled_from(handles)) if handles else ffi.NULL

    record("lifetimes", " ".join(steps))
    worst = "ok"
    for step in steps:
        before = len(pool.failures.records)
        error = None
        if step == "new_buffer":
            buffers.append(pool.fresh_buffer(draw(st.sampled_from([4, 4, 4, 3]))))
            continue
        if step == "new_error":
            errors.append(pool.new_error())
            continue
        if step in ("destroy_buffer", "delete_buffer"):
            b = pick(buffers)
            if b != ffi.NULL:
                head = ffi.cast("pjrtkit_head*", b)
                if step == "destroy_buffer" and head.kind != 0:
                    pool.keep_mapped(b)
            name = "PJRT_Buffer_Destroy" if step == "destroy_buffer" else "PJRT_Buffer_Delete"
            error = d.take_error(d.function(name)(d.new_args(name, buffer=b)))
        elif step == "read_buffer":
            out = ffi.new("char[]", 12)
            args = d.new_args("PJRT_Buffer_ToHostBuffer", src=pick(buffers), dst=out,
                              dst_size=12)
            error = d.take_error(d.function("PJRT_Buffer_ToHostBuffer")(args))
            if error is None and args.event != ffi.NULL:
                events.append(args.event)
        elif step == "dims_buffer":
            args = d.new_args("PJRT_Buffer_Dimensions", buffer=pick(buffers))
            error = d.take_error(d.function("PJRT_Buffer_Dimensions")(args))
        elif step == "copy_buffer":
            args = d.new_args("PJRT_Buffer_CopyToDevice", buffer=pick(buffers),
                              dst_device=d.device())
            error = d.take_error(d.function("PJRT_Buffer_CopyToDevice")(args))
            if error is None:
                buffers.append(args.dst_buffer)
        elif step == "execute":
            b = pick(buffers)
            try:
                args = d.execute_args(pool.loaded, [[b]], 1)
                error = d.take_error(d.function("PJRT_LoadedExecutable_Execute")(args))
                if error is None:
                    outputs, evs = d.collect_outputs(args, 1)
                    buffers.extend(x for x in outputs[0] if x != ffi.NULL)
                    events.extend(e for e in evs if e != ffi.NULL)
            except Exception as exc:  # noqa: BLE001 - the driver refusing is not a case
                record("lifetimes", f"driver: {exc}")
        elif step == "to_host_event":
            continue
        elif step in ("await_event", "on_ready_event", "destroy_event"):
            e = pick(events)
            if step == "await_event":
                error = d.take_error(d.function("PJRT_Event_Await")(
                    d.new_args("PJRT_Event_Await", event=e)))
            elif step == "on_ready_event":
                cb = pool.callback(ffi.typeof("PJRT_Event_OnReadyCallback"))
                error = d.take_error(d.function("PJRT_Event_OnReady")(
                    d.new_args("PJRT_Event_OnReady", event=e, callback=cb, user_arg=ffi.NULL)))
            else:
                if e != ffi.NULL and ffi.cast("pjrtkit_head*", e).ref != ffi.NULL:
                    pool._kept.append(ffi.from_handle(ffi.cast("pjrtkit_head*", e).ref))  # noqa: SLF001
                error = d.take_error(d.function("PJRT_Event_Destroy")(
                    d.new_args("PJRT_Event_Destroy", event=e)))
        elif step in ("destroy_error", "error_message"):
            e = pick(errors)
            if step == "destroy_error":
                d.function("PJRT_Error_Destroy")(d.new_args("PJRT_Error_Destroy", error=e))
            else:
                d.function("PJRT_Error_Message")(d.new_args("PJRT_Error_Message", error=e))
        outcome = _classify(pool, error, before)
        if outcome.startswith("bug"):
            return f"{outcome} (at {step})"
        if worst == "ok":
            worst = outcome  # the sequence is summarized by its first refusal
    return worst


_CASES = {"args": args_case, "lifetimes": lifetimes_case}


def _child(target: str, seed: int, start: int, stop: int) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    pool = Pool()
    case = _CASES[target]
    abort_at = os.environ.get("PJRTKIT_FUZZ_ABORT_AT")
    state = {"index": start}

    def record(function: str, detail: str) -> None:
        print(json.dumps({"start": state["index"], "call": function, "args": detail}),
              flush=True)

    @hypothesis_seed(seed * 1_000_003 + start)
    @settings(max_examples=stop - start, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), derandomize=False)
    @given(st.data())
    def run(data):
        index = state["index"]
        if index >= stop:
            return
        if abort_at is not None and index == int(abort_at):
            print(json.dumps({"start": index}), flush=True)
            os.abort()
        try:
            with pool.driver.scope():  # what a case makes through the driver ends with it
                outcome = case(pool, data.draw, st, record)
        except Exception as exc:  # noqa: BLE001 - the harness's own failure, reported as such
            import traceback
            where = traceback.extract_tb(exc.__traceback__)[-1]
            outcome = (f"harness-error:{type(exc).__name__}: {str(exc)[:200]} "
                       f"(line {where.lineno})")
        print(json.dumps({"index": index, "outcome": outcome}), flush=True)
        state["index"] += 1

    run()
    # hypothesis may stop short of max_examples when it has seen everything it can draw:
    # cases are counted as run, never as asked for.


def run_campaign(target: str, cases: int, seed: int = 0, batch: int = 2000) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PJRTKIT_CPU_MEMORY_LIMIT": "64M",
           "PJRTKIT_CPU_FUSION": "0", "PJRTKIT_CPU_NATIVE_LOOPS": "0"}

    def command_for(start: int, stop: int) -> list[str]:
        return [sys.executable, "-m", "pjrtkit_tools.fuzz_abi", "--child", target, str(seed),
                str(start), str(stop)]

    return summarize(run_in_children(command_for, cases, env, batch), target=target, seed=seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10000, help="cases per target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--json", help="write the summaries to this file")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        target, seed, start, stop = args.child
        _child(target, int(seed), int(start), int(stop))
        return 0
    return run_campaigns(args.targets.split(","),
                         lambda target: run_campaign(target, args.cases, args.seed),
                         args.json)


if __name__ == "__main__":
    sys.exit(main())
