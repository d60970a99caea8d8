"""Finding installed backends (stevedore over the entry-point group ``pjrtkit.backends``).

Listing never raises: a backend whose module fails to import, breaks the hook contract (a
misspelt or undecorated hook: ``pjrtkit.contract``), or cannot name its platform or build its
client topology, is reported with the reason and logged once. Loading one
backend by name (``load_backend``) raises ``BackendLoadFailure`` naming what is installed.

Starting a backend (importing its module, checking the contract, its ``pjrtkit_platform`` and
``pjrtkit_client_topology`` hooks) runs third-party code that may never return, so each
selected backend starts on its own daemon thread, all at once, and a backend that has not
finished within ``PJRTKIT_BACKEND_START_TIMEOUT_S`` seconds is reported failed, naming the step
it is stuck in; its thread is left behind (Python cannot stop a thread), everything else goes
on. A hook that hangs while holding the GIL in C code cannot be bounded this way.

``PJRTKIT_BACKENDS=cpu,tpu`` narrows which installed backends are selected (default: all).
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import os
import threading
import time

from stevedore import DriverManager, NamedExtensionManager
from stevedore.exception import NoMatches

from pjrtkit.ast_threads import serialize_ast_parse
from pjrtkit.backend import Backend
from pjrtkit.errors import BackendLoadFailure, FailedPrecondition, PluginContractError
from pjrtkit.fp_state import clean_thread
from pjrtkit.settings import seconds_setting

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "pjrtkit.backends"
SELECT_VARIABLE = "PJRTKIT_BACKENDS"
START_TIMEOUT_VARIABLE = "PJRTKIT_BACKEND_START_TIMEOUT_S"
DEFAULT_START_TIMEOUT_S = 60.0


class BackendStartTimeout(BackendLoadFailure):
    """A backend did not finish starting (import, contract, platform, topology) in time."""


@dataclasses.dataclass
class BackendStatus:
    """One installed backend as ``pjrtkit list`` shows it."""

    name: str
    version: str
    distribution: str
    status: str  # "ok", "failed", "unavailable" (FailedPrecondition: no hardware), "not selected"
    reason: str = ""
    backend: Backend | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def start_timeout_s() -> float:
    """Seconds a backend may take to start (``PJRTKIT_BACKEND_START_TIMEOUT_S``, default 60)."""
    return seconds_setting(START_TIMEOUT_VARIABLE, DEFAULT_START_TIMEOUT_S)


def selected_names() -> set[str] | None:
    """Backends named by PJRTKIT_BACKENDS, or None when it is unset or empty (all)."""
    value = os.environ.get(SELECT_VARIABLE, "").strip()
    if not value:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


def _distribution(entry_point) -> tuple[str, str]:
    """(distribution name, version) that provides ``entry_point``."""
    dist = getattr(entry_point, "dist", None)
    if dist is None:  # stevedore's cached entry points carry no distribution
        for candidate in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if candidate.name == entry_point.name and candidate.value == entry_point.value:
                dist = candidate.dist
                break
    if dist is None:
        return "unknown", "unknown"
    return dist.metadata["Name"], dist.version


def _check(backend: Backend) -> None:
    """A backend whose client topology cannot be built must not register: JAX registers
    plugins with fail_quietly=False, so it would break every JAX program."""
    topology = backend.client_topology(options={})
    if not topology.devices:
        raise RuntimeError("its client topology has no devices")


def _entry_points() -> dict:
    """Every entry point of the group by name, none of them imported."""
    manager = NamedExtensionManager(ENTRY_POINT_GROUP, names=[],
                                    on_missing_entrypoints_callback=None)
    return {ep.name: ep for ep in manager.list_entry_points()}


def installed_names() -> set[str]:
    """The names of every installed backend (nothing imported or started)."""
    return set(_entry_points())


# Backends import their modules one at a time (their start-up after that runs at once): on
# Python 3.11.7, two threads building Python ASTs at the same time (a module importing Triton's
# jit-decorated kernels, dataclasses, Numba) corrupt CPython's shared AST recursion counter and
# one import fails with "SystemError: AST constructor recursion depth mismatch" (seen here in
# the jax-tests runner's own tests: the cpu plugin failed to import in 3 of 4 runs before this
# lock, in none of 6 after). A backend waits for the lock at most _IMPORT_WAIT_S.
_IMPORT_LOCK = threading.Lock()
_IMPORT_WAIT_S = 5.0
# and ast.parse itself takes a lock (pjrtkit.ast_threads: the same counter, other threads).
serialize_ast_parse()


class _Start:
    """Starting one backend on a daemon thread: ``begin()``, then ``result(deadline)``."""

    def __init__(self, name: str, version: str, check: bool):
        self.name, self.version, self.check = name, version, check
        self.stage = "importing its module"
        self.backend: Backend | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=clean_thread(self._run), name=f"pjrtkit-start-{name}",
                                       daemon=True)

    def begin(self) -> _Start:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            self.backend = self._start()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self.error = exc

    def _start(self) -> Backend:
        failures = []
        try:
            self.stage = "waiting for another backend's module import"
            # a backend whose import hangs keeps the lock: the others go on without it after
            # a while (the race is rare; a hang must not stop the other backends)
            locked = _IMPORT_LOCK.acquire(timeout=_IMPORT_WAIT_S)
            try:
                self.stage = "importing its module"
                manager = DriverManager(
                    ENTRY_POINT_GROUP, self.name, invoke_on_load=False,
                    on_load_failure_callback=lambda _manager, ep, exc: failures.append((ep,
                                                                                        exc)))
            finally:
                if locked:
                    _IMPORT_LOCK.release()
        except NoMatches:
            if not failures:
                raise
            entry_point, exc = failures[0]
            raise BackendLoadFailure(f"import of {entry_point.value} failed: "
                                     f"{type(exc).__name__}: {exc}") from exc
        self.stage = "checking its hooks and calling pjrtkit_platform"
        backend = Backend(self.name, manager.driver, self.version)
        if self.check:
            self.stage = "calling pjrtkit_client_topology"
            _check(backend)
        self.stage = "done"
        return backend

    def result(self, deadline: float, timeout: float) -> Backend:
        """The started backend; raises what starting raised, or ``BackendStartTimeout``."""
        self.thread.join(max(0.0, deadline - time.monotonic()))
        if self.thread.is_alive():
            raise BackendStartTimeout(
                f"did not start within {timeout:g} s ({START_TIMEOUT_VARIABLE}): stuck "
                f"{self.stage}; its thread is left running and the backend is not used")
        if self.error is not None:
            raise self.error
        assert self.backend is not None
        return self.backend


def _reason(exc: BaseException) -> str:
    if type(exc) in (BackendLoadFailure, BackendStartTimeout):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def discover(select: set[str] | None = None) -> list[BackendStatus]:
    """Every installed backend with its status; starts and checks the selected ones (at once,
    each within ``start_timeout_s()``)."""
    if select is None:
        select = selected_names()
    timeout = start_timeout_s()
    entry_points = _entry_points()
    statuses: list[BackendStatus] = []
    starts: dict[str, _Start] = {}
    for name in sorted(entry_points):
        dist_name, version = _distribution(entry_points[name])
        status = BackendStatus(name, version, dist_name, "ok")
        if select is not None and name not in select:
            status.status = "not selected"
            status.reason = f"{SELECT_VARIABLE}={os.environ.get(SELECT_VARIABLE, '')}"
        else:
            starts[name] = _Start(name, version, check=True).begin()
        statuses.append(status)
    deadline = time.monotonic() + timeout
    for status in statuses:
        if status.name not in starts:
            continue
        try:
            status.backend = starts[status.name].result(deadline, timeout)
        except BaseException as exc:  # noqa: BLE001 - see below
            # Any failure of a third-party plugin is reported in its status, never raised:
            # one broken plugin must not break `import jax` or the listing of the others.
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt, SystemExit in the caller's thread: not the plugin's
            if isinstance(exc, FailedPrecondition):
                # The machine lacks what the backend needs (a GPU, a driver): expected, not a
                # broken plugin; `pjrtkit list` says why, JAX start-up stays quiet.
                status.status, status.reason = "unavailable", str(exc)
                log.debug("pjrtkit backend %r is unavailable here: %s", status.name, exc)
                continue
            status.status, status.reason = "failed", _reason(exc)
            log.warning("pjrtkit backend %r (%s %s) is not available: %s", status.name,
                        status.distribution, status.version, status.reason)
    return statuses


def load_backend(name: str) -> Backend:
    """Load one backend by name; raises BackendLoadFailure naming the installed ones."""
    entry_points = _entry_points()
    if name not in entry_points:
        raise BackendLoadFailure(
            f"no pjrtkit backend named {name!r} is installed; installed: "
            f"{', '.join(sorted(entry_points)) or 'none'} (install e.g. pjrtkit-{name})")
    _dist_name, version = _distribution(entry_points[name])
    timeout = start_timeout_s()
    try:
        return _Start(name, version, check=False).begin().result(
            time.monotonic() + timeout, timeout)
    except PluginContractError:
        raise  # already names the backend, the hook and the fix
    except BackendLoadFailure as exc:
        raise BackendLoadFailure(f"pjrtkit backend {name!r} failed to load: {exc}") from exc
    except Exception as exc:
        raise BackendLoadFailure(f"pjrtkit backend {name!r} failed to start: "
                                 f"{type(exc).__name__}: {exc}") from exc
