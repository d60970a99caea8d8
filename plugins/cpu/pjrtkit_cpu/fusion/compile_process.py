"""Numba compiles in a child process, so a running program keeps its core and the GIL.

A kernel's compile is seconds of Numba's own Python (typing, lowering) and LLVM. On the compile
thread of the user's process it holds the GIL most of that time: the program that runs unfused
meanwhile waits for the GIL at every op. Measured on the 2-core development machine, flax's
transformer LM step (82 kernels, 58 s of compile) took 30.6 s for its first ten calls on a
fresh kernel cache, against 9.8 s unfused without any compile (``python -m benchmarks --real
--only flax_lm``). So ``fusion.cache`` hands each compile to a child process (``serve``,
started at the first compile with this interpreter and the parent's ``sys.path``): the child
imports the kernel's module from the cache directory and compiles it there with Numba's
``cache=True``, which writes the machine code beside the source; the parent then imports the
same module and asks Numba for the same signature, which loads that code (tens of
milliseconds) instead of compiling.

The child is a helper, never a dependency. Each compile thread has its own child, which runs
one compile at a time; ``processes()`` children (``PJRTKIT_CPU_COMPILE_PROCESSES``, default half
the CPUs, 1 to 4) compile side by side, which one process's threads could not (Numba compiles
under one lock, and its Python under the GIL). A compile that fails in a child (a Numba
TypingError) is reported in the parent like an in-process failure. A child that ends while
compiling (an abort in LLVM, killed) fails that kernel only, which keeps running unfused, and a
new child is started for the next one: an abort in Numba no longer ends the user's process.
When no child can be started, after ``MAX_DEATHS`` children have ended while compiling, or when
Numba's cache does not give the child's code back (no writable cache directory), compiles run
in one compile thread of the parent as before, with one log line saying why.
``PJRTKIT_CPU_COMPILE_PROCESS=0`` keeps them there from the start.

Memory: Numba never frees a kernel's machine code, and the compiler's own state grows with
every kernel; that growth is now the child's (measured: 169 MB after one kernel, 365 MB after
flax LM's 82, while the parent grew 25 MB loading them). A child idle for ``IDLE_EXIT_S`` ends,
giving it back; the next compile starts another (its first kernel pays Numba's start, about a
second, and the helpers' compiles).

Protocol: frames of a 4-byte little-endian length and a pickle, requests on the child's stdin,
replies on a private copy of its stdout (its fd 1 then points to its stderr, so nothing Numba
prints can corrupt a reply). The child exits at end of input, so it never outlives its parent by
more than the compile it is in (on Linux it is also killed when the thread that started it,
the compile thread, ends).
"""
from __future__ import annotations

import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
import warnings

from pjrtkit.fp_state import clean_thread

log = logging.getLogger(__name__)

VARIABLE = "PJRTKIT_CPU_COMPILE_PROCESS"
PROCESSES_VARIABLE = "PJRTKIT_CPU_COMPILE_PROCESSES"
# Children that may end while compiling before compiles go back to the compile thread for good.
MAX_DEATHS = 4
# A child idle this long ends (it holds every kernel it compiled: Numba never frees one); the
# next compile starts another.
IDLE_EXIT_S = 60.0
_HEADER = struct.Struct("<I")


class KernelCompileError(RuntimeError):
    """The child could not compile a kernel: Numba's error (its type name starts the message),
    or the child ended while compiling."""


def enabled() -> bool:
    return os.environ.get(VARIABLE, "1").strip() not in ("", "0")


def _write_frame(stream, value) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_frame(stream):
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the other end closed")
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the other end closed mid-frame")
    return pickle.loads(data)  # noqa: S301  (frames come from our own parent or child)


# -- the parent's side ----------------------------------------------------------------------------

class _Pool:
    """The compile children of this process (one per compile thread) and why compiles stopped
    going to them."""

    def __init__(self):
        self.lock = threading.RLock()
        self.children: dict[int, _Child] = {}  # by compile thread
        self.deaths = 0  # children that ended while compiling
        self.given_up: str | None = None if enabled() else f"{VARIABLE}=0"

    def child(self) -> _Child | None:
        """The calling compile thread's child (None once given up)."""
        with self.lock:
            if self.given_up is not None:
                return None
            return self.children.setdefault(threading.get_ident(), _Child(self))

    def give_up(self, why: str) -> None:
        """From now on compiles stay in this process. The children are not stopped here (one
        may be compiling, and the caller may hold its own child's lock): no compile reaches
        them any more, so each ends once idle."""
        with self.lock:
            if self.given_up is None:
                self.given_up = why
                log.warning("pjrtkit_cpu: Numba compiles run in this process from now on: %s",
                            why)


class _Child:
    """One compile child process, used by one compile thread."""

    def __init__(self, pool: _Pool):
        self.pool = pool
        self.lock = threading.Lock()  # the compile thread's against the idle reaper's
        self.process: subprocess.Popen | None = None
        self.last_used = 0.0
        self.reaper: threading.Thread | None = None

    def _used(self) -> None:
        """Lock held: a compile just ended; the child ends after ``IDLE_EXIT_S`` without one."""
        self.last_used = time.monotonic()
        if self.reaper is None or not self.reaper.is_alive():
            self.reaper = threading.Thread(target=clean_thread(self._end_when_idle), daemon=True,
                                           name="pjrtkit-cpu-compile-reaper")
            self.reaper.start()

    def _end_when_idle(self) -> None:
        while True:
            with self.lock:
                if self.process is None:
                    return
                idle = time.monotonic() - self.last_used
                if idle >= IDLE_EXIT_S:
                    self._stop_locked()
                    return
            time.sleep(IDLE_EXIT_S - idle)

    def _stop_locked(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            for stream in (process.stdin, process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            try:
                process.kill()
                process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass

    def _start_locked(self) -> subprocess.Popen | None:
        """A running child, or None after giving up (the reason is logged)."""
        if self.pool.deaths >= MAX_DEATHS:
            self.pool.give_up(f"{MAX_DEATHS} compile processes ended while compiling")
            return None
        code = ("import sys; sys.path[:0] = [p for p in sys.argv[1:] if p not in sys.path]; "
                "from pjrtkit_cpu.fusion import compile_process; compile_process.serve()")
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", code, *[p for p in sys.path if p]],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                close_fds=True)
        except OSError as exc:
            self.pool.give_up(f"no compile process could start ({type(exc).__name__}: {exc})")
            return None
        self.process = process
        try:
            _write_frame(process.stdin, ("hello",))
            reply = _read_frame(process.stdout)
        except (OSError, EOFError, pickle.PickleError) as exc:
            reply = f"{type(exc).__name__}: {exc}"
        if reply != ("ready",):
            self._stop_locked()
            self.pool.give_up(f"the compile process could not start: {reply!r:.300}")
            return None
        return process

    def compile(self, path: str, module_name: str, signature) -> bool:
        """Compile ``kernel`` (and the module's C entry, if any) of the source at ``path`` in
        the child; False when compiles no longer go to a child (compile in this process).
        Raises KernelCompileError when the child could not compile it."""
        with self.lock:
            if self.pool.given_up is not None:
                return False
            process = self.process if self.process is not None and \
                self.process.poll() is None else self._start_locked()
            if process is None:
                return False
            try:
                _write_frame(process.stdin, ("compile", path, module_name, signature))
                reply = _read_frame(process.stdout)
                self._used()
            except (OSError, EOFError, pickle.PickleError):
                code = process.wait()
                self.process = None
                with self.pool.lock:
                    self.pool.deaths += 1
                how = (f"signal {signal.Signals(-code).name}" if code < 0
                       else f"exit status {code}")
                raise KernelCompileError(
                    f"the compile process ended ({how}) while compiling {path}") from None
        if reply[0] == "ok":
            for message in reply[1]:
                log.debug("pjrtkit_cpu: compiling %s warned: %s", path, message)
            return True
        _, type_name, message, details = reply
        log.debug("pjrtkit_cpu: compiling %s failed in the compile process:\n%s", path, details)
        raise KernelCompileError(f"{type_name}: {message}")


def processes() -> int:
    """Compile children (and compile threads) one process uses: ``PJRTKIT_CPU_COMPILE_PROCESSES``,
    else half the CPUs this process may run on, at least 1 and at most 4 (each child holds
    Numba's memory while it lives; the other half is the program's)."""
    value = os.environ.get(PROCESSES_VARIABLE, "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            log.warning("%s=%r is not a number of processes; using the default",
                        PROCESSES_VARIABLE, value)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 2
    return max(1, min(4, cpus // 2))


def compile_threads() -> int:
    """Threads the compile queue runs on: one per child, or one when compiles stay in this
    process (Numba compiles one function at a time under its own lock)."""
    return processes() if _pool.given_up is None else 1


_pool = _Pool()


def _forget_the_parents_children() -> None:
    # A forked process must not write into its parent's pipes: it starts its own children.
    global _pool
    _pool = _Pool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_the_parents_children)


def compile_elsewhere(path: str, module_name: str, signature) -> bool:
    """See ``_Child.compile``; False once compiles stay in this process."""
    child = _pool.child()
    return child is not None and child.compile(path, module_name, signature)


def stop_using(why: str) -> None:
    """Compile in this process from now on (``why`` is logged once)."""
    _pool.give_up(why)


def child_pids() -> list[int]:
    """The running compile children's pids (tests)."""
    with _pool.lock:
        children = list(_pool.children.values())
    return [c.process.pid for c in children
            if c.process is not None and c.process.poll() is None]


# -- the child's side -----------------------------------------------------------------------------

def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def import_and_compile(path: str, module_name: str, signature):
    """Import the kernel module at ``path`` as ``module_name`` (kept in ``sys.modules``) and
    compile its ``kernel`` for ``signature`` (one (dtype, ndim, readonly) per C-contiguous
    array argument): Numba compiles it, or loads it from its cache. The module's ``native``
    C entry, if any, compiles (or loads) at import. The dispatcher."""
    import importlib.util

    from numba import from_dtype, types

    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    argtypes = [types.Array(from_dtype(dtype), ndim, "C", readonly=readonly)
                for dtype, ndim, readonly in signature]
    module.kernel.compile(types.void(*argtypes))
    return module.kernel


def _compile_here(path: str, module_name: str, signature) -> list[str]:
    """The child's compile (its module is dropped after: the parent loads its own)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import_and_compile(path, module_name, signature)
        finally:
            sys.modules.pop(module_name, None)
    return [str(w.message)[:500] for w in caught]


def serve() -> None:
    """The child's loop: answer compile requests until the parent closes its end."""
    _die_with_parent()
    # Ctrl-C in a terminal reaches the whole process group: the parent decides, not us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever prints goes where stderr goes, never into a reply
    sys.stdout = sys.stderr
    try:
        if _read_frame(requests) != ("hello",):
            return
        import numba  # noqa: F401  (ready means compiles need no more imports than theirs)
        _write_frame(replies, ("ready",))
    except EOFError:
        return
    except Exception as exc:  # noqa: BLE001  (told to the parent, which gives up on us)
        _write_frame(replies, ("failed", f"{type(exc).__name__}: {exc}"))
        return
    while True:
        try:
            request = _read_frame(requests)
        except EOFError:
            return
        _, path, module_name, signature = request
        try:
            reply = ("ok", _compile_here(path, module_name, signature))
        except Exception as exc:  # noqa: BLE001  (a compile error is the parent's to report)
            first = (str(exc).strip().splitlines() or [""])[0]
            reply = ("error", type(exc).__name__, first, traceback.format_exc()[-4000:])
        _write_frame(replies, reply)
