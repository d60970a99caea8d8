"""Compile generated Numba kernels off the critical path, cached on disk across processes.

Each kernel's source is written once to ``$PJRTKIT_CACHE_DIR/fused/`` (default
``~/.cache/pjrtkit``) under a name derived from its hash and imported from there, so Numba's
``cache=True`` finds its compiled code in that directory's ``__pycache__`` in every later
process. Compiles are queued on background threads (``compile_process.compile_threads``: one
per compile child, one when there are none); the caller gets a Future and keeps running the
unfused kernels until it resolves. Identical sources share one Future within a process. A
thread hands each compile Numba's cache does not already hold to its child process
(``compile_process``: Numba's typing and LLVM there, not under this process's GIL) and then
loads the child's code from the cache; without a child it compiles itself. Numba itself is
imported on the caller's thread (see ``prepare_background_compiles``).

Bounded. Numba never frees a compiled function's machine code (about 1 MiB of RSS per kernel,
measured by ``make soak``). Constants are kernel arguments (``kernel.baked_literals``), so
programs that differ only in constants share one kernel, but a stream of programs of distinct
structure (new shapes, say) would still grow the process without end. So a process compiles at
most ``PJRTKIT_CPU_FUSED_KERNEL_LIMIT`` distinct kernels (default 1024); past it, and while
``PENDING_LIMIT`` compiles already wait for the compile threads, a new kernel is not compiled
and its group keeps running the unfused kernels (same results, slower); a kernel skipped for a
full queue is asked for again by its next call that finds room (``BackgroundCompiled``), so a
program whose first call queues more kernels than that still gets all of them, and one that is
never called again costs nothing. At most
``KERNELS_KEPT`` compiled kernels stay in this table for sharing (least recently asked for go
first; an executable that holds one keeps it alive). On disk, at most ``DISK_KERNELS_KEPT``
kernel sources (with their Numba and Python cache files) stay: every ``PRUNE_EVERY`` new
sources, the oldest past that number and older than ``PRUNE_MIN_AGE_S`` are deleted (another
process that still wanted one compiles it again).
"""
from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import logging
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from pjrtkit.fp_state import reset_thread
from pjrtkit.switch_interval import short_switch_interval

from pjrtkit_cpu.fusion import compile_process

log = logging.getLogger(__name__)

_FORMAT_VERSION = "1"  # bump when the generated code's conventions change
_lock = threading.Lock()
_executor: concurrent.futures.ThreadPoolExecutor | None = None
_futures: collections.OrderedDict[str, concurrent.futures.Future] = collections.OrderedDict()
_pending = 0  # submitted, not finished

# Compiled kernels kept for reuse (each holds Numba's machine code, some 100 KiB).
KERNELS_KEPT = 512
# Kernels waiting for the compile threads; past it new kernels are not compiled.
PENDING_LIMIT = 64
# Kernel sources kept on disk, and how often and how old before pruning looks at them.
DISK_KERNELS_KEPT = 4096
PRUNE_EVERY = 64
PRUNE_MIN_AGE_S = 3600.0
_sources_written = 0
LIMIT_VARIABLE = "PJRTKIT_CPU_FUSED_KERNEL_LIMIT"
DEFAULT_KERNEL_LIMIT = 1024
_compiles_started = 0


def kernel_limit() -> int:
    """Distinct kernels one process may compile (``PJRTKIT_CPU_FUSED_KERNEL_LIMIT``)."""
    value = os.environ.get(LIMIT_VARIABLE, "").strip()
    try:
        return max(0, int(value)) if value else DEFAULT_KERNEL_LIMIT
    except ValueError:
        log.warning("%s=%r is not a number of kernels; using %d", LIMIT_VARIABLE, value,
                    DEFAULT_KERNEL_LIMIT)
        return DEFAULT_KERNEL_LIMIT


class CompileSkipped(RuntimeError):
    """A kernel was not compiled: ``PENDING_LIMIT`` compiles were already waiting (``retry``:
    ask again when the queue has room) or the process's kernel limit is reached (for good)."""

    def __init__(self, message: str, retry: bool):
        super().__init__(message)
        self.retry = retry


def queue_has_room() -> bool:
    """Fewer than ``PENDING_LIMIT`` compiles wait (read without the lock: a hint)."""
    return _pending < PENDING_LIMIT


def cache_dir() -> Path:
    root = os.environ.get("PJRTKIT_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "pjrtkit")
    return Path(root) / "fused"


# The loops whose compile failed, by what they compute: each is reported once per process.
_reported: set[str] = set()


def report_fallback(chain: str, exc: BaseException, outcome: str) -> None:
    """One warning line per distinct ``chain`` per process, never a traceback (that goes to
    the debug log): a loop that could not be compiled or run, the exception's first line,
    and what runs instead (``outcome``). The results are the same either way."""
    first_line = (str(exc).strip().splitlines() or [""])[0][:200]
    log.debug("pjrtkit_cpu: %s failed", chain, exc_info=exc)
    with _lock:
        if chain in _reported:
            return
        _reported.add(chain)
    log.warning("pjrtkit_cpu: %s: %s: %s; %s", chain, type(exc).__name__, first_line, outcome)


def compile_async(source: str, signature: list[tuple[np.dtype, int, bool]],
                  chain: str = "a fused loop",
                  always: bool = False) -> concurrent.futures.Future:
    """A Future of the Numba dispatcher for ``kernel`` in ``source``, compiled for
    ``signature``: one (dtype, ndim, readonly) per argument, all C-contiguous arrays. The
    dispatcher never compiles again afterwards (a call with other types raises TypeError).
    ``chain`` names what the loop computes (its ops and shape) in the one warning a failed
    compile gives (``report_fallback``). ``always``: a loop an op cannot run without (it waits
    for the Future), compiled past both limits."""
    global _executor, _pending, _compiles_started
    key = hashlib.sha256(
        f"{_FORMAT_VERSION}\n{source}\n{signature}".encode()).hexdigest()[:24]
    with _lock:
        future = _futures.get(key)
        if future is not None:
            _futures.move_to_end(key)
            return future
        limit = kernel_limit()
        if not always and (_pending >= PENDING_LIMIT or _compiles_started >= limit):
            if _compiles_started == limit:
                _compiles_started += 1  # log the limit once
                log.warning("pjrtkit_cpu: %d fused kernels compiled in this process (%s); new "
                            "fused groups run unfused from now on", limit, LIMIT_VARIABLE)
            skipped: concurrent.futures.Future = concurrent.futures.Future()
            full = _compiles_started < limit
            skipped.set_exception(CompileSkipped(
                f"{PENDING_LIMIT} fused kernels already wait for the compile threads" if full
                else f"{LIMIT_VARIABLE}={limit} reached", retry=full))
            return skipped
        _compiles_started += 1
        if _executor is None:
            prepare_background_compiles()
            _executor = concurrent.futures.ThreadPoolExecutor(
                compile_process.compile_threads(), thread_name_prefix="pjrtkit-cpu-numba",
                initializer=reset_thread)
        _pending += 1
        future = _executor.submit(_compile, key, source, signature, chain)
        _futures[key] = future
        _evict_locked()
    future.add_done_callback(_finished)
    return future


def _finished(_future: concurrent.futures.Future) -> None:
    global _pending
    with _lock:
        _pending -= 1


def _evict_locked() -> None:
    """Drop the least recently used finished kernels past ``KERNELS_KEPT`` (lock held)."""
    excess = len(_futures) - KERNELS_KEPT
    if excess <= 0:
        return
    for key in [k for k, f in _futures.items() if f.done()][:excess]:
        del _futures[key]
        sys.modules.pop(_module_name(key), None)


def cache_sizes() -> dict[str, int]:
    """Kernels in the table (compiled or failed), compiles waiting, generated modules loaded."""
    with _lock:
        return {"fused_kernels": len(_futures), "fused_compiles_pending": _pending,
                "fused_compiles_started": min(_compiles_started, kernel_limit()),
                "fused_modules": sum(1 for name in list(sys.modules)
                                     if name.startswith(_MODULE_PREFIX))}


_MODULE_PREFIX = "pjrtkit_cpu_fused_"


def _module_name(key: str) -> str:
    return _MODULE_PREFIX + key


class BackgroundCompiled:
    """Base of the kernels that run a fallback until their Numba function is compiled in the
    background: ``_fast`` is None until the compile of ``_compile_in_background`` succeeds
    (and stays None if it fails, so the fallback keeps serving); ``future`` is the compile.
    A compile skipped because the queue was full is kept in ``_retry``: the subclass's
    fallback path calls ``_retry_skipped`` when it is set, which asks again once there is
    room (``then``, a done-callback, is added to every try's Future)."""

    __slots__ = ("_fast", "future", "_retry")

    def _compile_in_background(self, source: str, signature, chain: str = "a fused loop",
                               then=None) -> None:
        self._fast = None
        future = self.future = compile_async(source, signature, chain)
        skipped = future.exception() if future.done() else None
        self._retry = (source, signature, chain, then) if (
            isinstance(skipped, CompileSkipped) and skipped.retry) else None
        future.add_done_callback(self._ready)
        if then is not None:
            future.add_done_callback(then)

    def _retry_skipped(self) -> None:
        """Ask again for a compile skipped for a full queue, if there is room now."""
        retry = self._retry
        if retry is not None and queue_has_room():
            self._compile_in_background(*retry)

    def _ready(self, future: concurrent.futures.Future) -> None:
        if future.exception() is None:
            self._fast = future.result()


def prepare_background_compiles() -> None:
    """Load every shared library before the compile thread starts (once per process: about
    half a second of imports; the plugin has it done while the parser child works on a
    process's first program, ``plugin.pjrtkit_client_topology``).

    Loading a library (dlopen) on the compile thread while another thread walks the loaded
    libraries with a Python callback (threadpoolctl's dl_iterate_phdr, which the BLAS thread
    switching runs once) deadlocks: each holds the lock the other needs (the loader lock, the
    GIL). So Numba and llvmlite are imported here, on the compiling caller's thread, and the
    BLAS libraries are looked up before any background work exists.
    """
    import numba  # noqa: F401  (its extension modules and libllvmlite)

    # The helpers generated kernels import (they pull in numba.extending, llvmlite.ir).
    from pjrtkit_cpu import vecmath  # noqa: F401
    from pjrtkit_cpu.fusion import rowmem, rowreduce  # noqa: F401

    from pjrtkit_cpu import blas
    blas._blas()  # noqa: SLF001  (the one-time library scan, done now rather than concurrently)


def wait_all(timeout: float | None = None) -> None:
    """Block until every kernel submitted so far is compiled (tests, benchmarks' warm-up)."""
    with _lock:
        pending = list(_futures.values())
    concurrent.futures.wait(pending, timeout=timeout)


def _compile(key: str, source: str, signature, chain: str):
    try:
        path = _write_source(key, source)
        # Unless Numba has it cached already, the compile process compiles and caches it;
        # this process then loads that code. Loading (and compiling, when it stays here) is
        # Python that gives the GIL up at every file read: beside a program running
        # interpreted, at the default switch interval, each wait to get it back lasted 5 ms.
        elsewhere = not _numba_cached(key, path) and compile_process.compile_elsewhere(
            str(path), _module_name(key), signature)
        with short_switch_interval():
            dispatcher = compile_process.import_and_compile(str(path), _module_name(key),
                                                            signature)
        dispatcher.disable_compile()
        if elsewhere and sum(dispatcher.stats.cache_misses.values()):
            compile_process.stop_using(
                f"Numba's cache in {path.parent} did not give back the compile process's code")
        return dispatcher
    except Exception as exc:
        report_fallback(f"compiling {chain}", exc,
                        f"its unfused kernels keep running (source in "
                        f"{cache_dir() / f'k_{key}.py'})")
        raise


def _write_source(key: str, source: str) -> Path:
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"k_{key}.py"
    # Never rewrite an existing file: Numba's cache is keyed by the file's timestamp.
    if not path.exists() or path.read_text() != source:
        tmp = directory / f".k_{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(source)
        os.replace(tmp, path)
        _count_written_source(directory)
    return path


def _numba_cached(key: str, path: Path) -> bool:
    """Whether Numba's cache beside ``path`` has an index for its ``kernel`` on this Python
    (one signature per source: the signature is part of ``key``)."""
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    return any((path.parent / "__pycache__").glob(f"k_{key}.kernel-*.{tag}.nbi"))


def _count_written_source(directory: Path) -> None:
    global _sources_written
    _sources_written += 1
    if _sources_written % PRUNE_EVERY == 1:
        try:
            prune_disk(directory)
        except OSError:  # another process pruning at the same time; next time then
            log.debug("pjrtkit_cpu: pruning %s failed", directory, exc_info=True)


def prune_disk(directory: Path, keep: int | None = None,
               min_age_s: float | None = None) -> int:
    """Delete the oldest kernel sources of ``directory`` past ``keep`` (``DISK_KERNELS_KEPT``)
    that are older than ``min_age_s`` (``PRUNE_MIN_AGE_S``) and not loaded in this process,
    with their cache files; the number deleted."""
    keep = DISK_KERNELS_KEPT if keep is None else keep
    min_age_s = PRUNE_MIN_AGE_S if min_age_s is None else min_age_s
    dated = []
    for path in directory.glob("k_*.py"):
        try:
            dated.append((path.stat().st_mtime, path))
        except FileNotFoundError:
            continue
    dated.sort()
    newest_allowed = time.time() - min_age_s
    deleted = 0
    for mtime, path in dated[:max(0, len(dated) - keep)]:
        if mtime > newest_allowed:
            break
        if _module_name(path.stem[2:]) in sys.modules:
            continue
        for cached in (directory / "__pycache__").glob(f"{path.stem}.*"):
            cached.unlink(missing_ok=True)
        path.unlink(missing_ok=True)
        deleted += 1
    return deleted
