"""Parse programs in a child process, so that a parser crash cannot take the user's process down.

jaxlib's StableHLO deserializer is not safe on damaged input: a flipped bit in a portable
artifact made it corrupt the heap ("free(): corrupted unsorted chunks") or throw through C++
while reporting a diagnostic that is not UTF-8, and either aborts the process. No check we can
make beforehand rules that out, so the runtime hands every program it compiles to a child
interpreter (``python -m pjrtkit.stablehlo.parser_child``) that parses it with the ordinary
loader and sends the plain-Python Program back, pickled. MLIR never runs in the user's process
on that path. If the child dies, the program is reported as INVALID_ARGUMENT naming the
signal, and the next compile starts a fresh child.

One child per process, started when the runtime creates a client (``start_parser``; it warms
up, importing jaxlib's MLIR layer for about a quarter of a second, while the user's program
gets to its first compile) or at the first compile, and kept; requests are serialized (the
loader serializes parses anyway). The thread that waits for the child's answer to the first
request of at least ``MEANWHILE_MIN_BYTES`` runs what plugins asked to do meanwhile
(``while_the_child_works``: the cpu plugin's Numba imports). A
parse that outlasts ``PJRTKIT_PARSER_TIMEOUT_S`` (default 600) is stopped.
``PJRTKIT_ISOLATED_PARSER=0`` parses in-process instead (a damaged program can then abort or
hang).
"""
from __future__ import annotations

import atexit
import collections
import dataclasses
import os
import pickle
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from pjrtkit.errors import ErrorCode, Internal, InvalidArgument, PjrtError
from pjrtkit.stablehlo.ir import Program

ENABLED = os.environ.get("PJRTKIT_ISOLATED_PARSER", "1") != "0"

# A parse that takes longer than this is treated as a hang (damaged artifacts can send jaxlib's
# deserializer into an endless loop): the child is killed and the program is INVALID_ARGUMENT.
PARSE_TIMEOUT_S = float(os.environ.get("PJRTKIT_PARSER_TIMEOUT_S", "600"))

_HEADER = struct.Struct("<Q")

# Programs smaller than this do not run the tasks plugins queued (``while_the_child_works``):
# their parse is too short to hide them (an eager jnp op's program is 1-2 KiB; a training
# step's is tens of KiB).
MEANWHILE_MIN_BYTES = 16 << 10


def write_message(stream, payload: bytes) -> None:
    stream.write(_HEADER.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def read_message(stream) -> bytes | None:
    """One length-prefixed message, or None at end of stream."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    payload = stream.read(size)
    return payload if len(payload) == size else None


def error_reply(exc: BaseException) -> tuple:
    """What the child sends for a failed parse: the PJRT code and the message."""
    if isinstance(exc, PjrtError):
        return ("error", int(exc.code), exc.message)
    return ("error", int(ErrorCode.INTERNAL), f"{type(exc).__name__}: {exc}")


def _error_class(code: int) -> type[PjrtError]:
    pending = [PjrtError]
    while pending:
        cls = pending.pop()
        if cls is not PjrtError and cls.code == code:
            return cls
        pending.extend(cls.__subclasses__())
    return PjrtError


class ParserProcess:
    """The child that parses programs for this process (see the module docstring)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        self._owner_pid = os.getpid()
        self._stderr_tail = collections.deque(maxlen=20)

    def start(self) -> None:
        """Start the child now if none is running; a failure is left to the first request."""
        with self._lock:
            try:
                self._running_child()
            except (OSError, PjrtError):
                pass

    def parse(self, code: bytes | str) -> Program:
        # a small program parses in milliseconds: the queued tasks wait for a larger one (or
        # for the plugin needing their work), rather than delaying the first small compile
        return self.request(code, meanwhile=len(code) >= MEANWHILE_MIN_BYTES)

    def request(self, request, *, meanwhile: bool = True):
        """Send one request (program bytes or text to parse, or a ``PartitionRequest``) and
        return the child's answer, raising the error it reports. ``meanwhile``: this thread
        runs the tasks plugins queued (``while_the_child_works``) before reading it."""
        with self._lock:
            child = self._running_child()
            try:
                write_message(child.stdin, pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
                try:
                    if meanwhile:
                        _run_meanwhile()
                finally:  # the answer is read even if a task was interrupted: the next
                    reply = self._read_reply(child)  # request must not read this one's
            except (BrokenPipeError, OSError):
                reply = None
            if reply is None:
                raise self._crashed(child)
        status, *rest = pickle.loads(reply)
        if status == "ok":
            return rest[0]
        code_value, message = rest
        cls = _error_class(code_value)
        if cls is PjrtError:
            raise PjrtError(message, code=ErrorCode(code_value))
        raise cls(message)

    def close(self) -> None:
        with self._lock:
            child, self._child = self._child, None
        if child is not None and child.poll() is None:
            try:
                child.stdin.close()
                child.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                child.kill()

    def _running_child(self) -> subprocess.Popen:
        if self._owner_pid != os.getpid():
            # this process was forked: the pipes belong to the parent's child; leave them
            self._child, self._owner_pid = None, os.getpid()
        if self._child is not None and self._child.poll() is None:
            return self._child
        if not sys.executable:
            raise Internal("cannot start the program parser: sys.executable is unknown; set "
                           "PJRTKIT_ISOLATED_PARSER=0 to parse in this process")
        # the child imports the pjrtkit and jaxlib this process imported
        path = os.pathsep.join(p for p in sys.path if isinstance(p, str) and p)
        self._stderr_tail.clear()
        self._child = subprocess.Popen(
            [sys.executable, "-m", "pjrtkit.stablehlo.parser_child"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": path},
            # the child must not take the terminal's Ctrl-C meant for the user's program
            start_new_session=True)
        threading.Thread(target=_drain, args=(self._child.stderr, self._stderr_tail),
                         daemon=True, name="pjrtkit-parser-stderr").start()
        return self._child

    def _read_reply(self, child: subprocess.Popen) -> bytes | None:
        deadline = time.monotonic() + PARSE_TIMEOUT_S
        with selectors.DefaultSelector() as selector:
            selector.register(child.stdout, selectors.EVENT_READ)
            while not selector.select(timeout=min(1.0, max(0.0, deadline - time.monotonic()))):
                if child.poll() is not None:
                    return None
                if time.monotonic() >= deadline:
                    child.kill()
                    child.wait()
                    self._child = None
                    raise InvalidArgument(f"parsing the program took longer than "
                                          f"{PARSE_TIMEOUT_S:.0f} s; the parser was stopped")
        return read_message(child.stdout)

    def _crashed(self, child: subprocess.Popen) -> InvalidArgument:
        try:
            status = child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            status = child.wait()
        self._child = None
        how = f"exit status {status}"
        if status < 0:
            try:
                how = f"signal {signal.Signals(-status).name}"
            except ValueError:
                pass
        time.sleep(0.05)  # let the drain thread read the child's last words
        said = b"".join(self._stderr_tail).decode("utf-8", "replace").strip()[-600:]
        return InvalidArgument(
            f"the program crashed jaxlib's StableHLO parser or XLA's partitioner ({how}); it "
            f"is damaged or not a program JAX produced. The parser ran in a child process, "
            f"so this process is unaffected; the next compile starts a new parser."
            + (f" The parser's last output: {said}" if said else ""))


def _drain(stream, tail) -> None:
    """Keep the child's stderr (MLIR diagnostics, crash reports) from filling its pipe, and
    its last lines for the error message."""
    for line in iter(stream.readline, b""):
        tail.append(line)


_PARSER = ParserProcess()
atexit.register(_PARSER.close)

# Work to do once, on the thread of the next request, while the child works on it.
_meanwhile: list[Callable[[], None]] = []
_meanwhile_lock = threading.Lock()


def while_the_child_works(task: Callable[[], None]) -> None:
    """Run ``task()`` once, on the thread that sends the next request to the child, between
    sending it and reading the answer: a plugin's one-time imports then overlap the child's
    start and the parse instead of following them (the first compile of a process waits for
    both). Nothing is kept when programs are parsed in-process (``PJRTKIT_ISOLATED_PARSER=0``):
    the plugin then does the work where it needs it, as without this. An exception from
    ``task`` is dropped (the plugin meets it again where it needs the work done). A task
    waiting already is not queued twice (a plugin asks at every client it makes)."""
    if ENABLED:
        with _meanwhile_lock:
            if task not in _meanwhile:
                _meanwhile.append(task)


def _run_meanwhile() -> None:
    if not _meanwhile:
        return
    with _meanwhile_lock:
        tasks = _meanwhile[:]
        del _meanwhile[:]
    for task in tasks:
        try:
            task()
        except Exception:  # noqa: BLE001 - the plugin meets it again where it needs the work
            pass


def start_parser() -> None:
    """Start the parser child ahead of the first compile (nothing when parsing in-process or
    when it runs already)."""
    if ENABLED:
        _PARSER.start()


def warm_partitioner(num_devices: int) -> None:
    """Have the child ready XLA's partitioner for ``num_devices`` devices in the background
    (``WarmPartitionerRequest``), once per device count, so that the first sharded program's
    compile does not wait for it. The runtime asks at a client's first compile (a client that
    never compiles, a backend JAX started and the program does not use, pays nothing)."""
    if not ENABLED or num_devices <= 1:
        return
    with _warmed_lock:
        if num_devices <= _warmed[0]:
            return
        _warmed[0] = num_devices
    # The request waits for the child's start-up: on a thread of its own, never the
    # compiling one (its reply comes as soon as the child reads it; the work goes on there).
    threading.Thread(target=_warm_partitioner, args=(num_devices,), daemon=True,
                     name="pjrtkit-warm-partitioner").start()


_warmed = [1]  # the most devices a warm-up was asked for
_warmed_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class WarmPartitionerRequest:
    """Ask the child to ready XLA's partitioner (``jaxlib.xla_client`` and a private XLA:CPU
    client of ``num_devices`` devices: a third of a second of imports the first partition
    otherwise waits for) on a background thread, and answer at once."""

    num_devices: int


def _warm_partitioner(num_devices: int) -> None:
    try:
        _PARSER.request(WarmPartitionerRequest(num_devices), meanwhile=False)
    except Exception:  # noqa: BLE001 - the first partition meets whatever this would have
        pass


def parse_isolated(code: bytes | str) -> Program:
    """Parse ``code`` in the child process (``pjrtkit.stablehlo.loader.parse_program`` there)."""
    return _PARSER.parse(code)


@dataclasses.dataclass(frozen=True)
class PartitionRequest:
    """Ask the child to partition a global program with XLA and parse the per-device one
    (``pjrtkit.stablehlo.partition.partition_and_parse`` there)."""

    code: bytes
    compile_options: bytes
    num_replicas: int
    num_partitions: int


def partition_isolated(code: bytes, compile_options: bytes, *, num_replicas: int,
                       num_partitions: int) -> tuple[Program, bytes]:
    """(per-device Program, its bytecode), partitioned and parsed in the child process: XLA's
    compiler runs there too, so an abort in it is INVALID_ARGUMENT, not a dead process."""
    return _PARSER.request(PartitionRequest(bytes(code), bytes(compile_options),
                                            num_replicas, num_partitions))


@dataclasses.dataclass(frozen=True)
class BytecodeTextRequest:
    """Ask the child to print an MLIR bytecode module of a dialect jaxlib bundles as text
    (``pjrtkit.stablehlo.mlir_text.bytecode_text`` there)."""

    bytecode: bytes
    dialect_module: str  # a module with ``register_dialect(context)``, e.g. jaxlib.triton.dialect


def bytecode_text_isolated(bytecode: bytes, dialect_module: str) -> str:
    """``bytecode`` printed as MLIR text, parsed in the child process (in this one under
    ``PJRTKIT_ISOLATED_PARSER=0``): bytes that would abort jaxlib's MLIR are
    INVALID_ARGUMENT, not a dead process. Bytecode that does not parse is INVALID_ARGUMENT."""
    if not ENABLED:
        from pjrtkit.stablehlo.mlir_text import bytecode_text

        return bytecode_text(bytes(bytecode), dialect_module)
    return _PARSER.request(BytecodeTextRequest(bytes(bytecode), dialect_module))


@dataclasses.dataclass(frozen=True)
class ModuleAttributesRequest:
    """Ask the child for a program with module attributes set, as MLIR bytecode
    (``pjrtkit.stablehlo.mlir_text.with_module_attributes`` there)."""

    code: bytes
    attributes: tuple[tuple[str, str], ...]  # (name, MLIR attribute text)


def with_module_attributes_isolated(code: bytes, attributes: dict[str, str]) -> bytes:
    """``code`` with the module attributes set, re-serialized in the child process (in this one
    under ``PJRTKIT_ISOLATED_PARSER=0``)."""
    if not ENABLED:
        from pjrtkit.stablehlo.mlir_text import with_module_attributes

        return with_module_attributes(bytes(code), attributes)
    return _PARSER.request(ModuleAttributesRequest(bytes(code), tuple(attributes.items())))
