"""Finding installed backends (stevedore over the entry-point group ``pjrtkit.backends``).

Listing never raises: a backend whose module fails to import, breaks the hook contract (a
misspelt or undecorated hook: ``pjrtkit.contract``), or cannot name its platform or build its
client topology, is reported with the reason and logged once. Loading one
backend by name (``load_backend``) raises ``BackendLoadFailure`` naming what is installed.

``PJRTKIT_BACKENDS=cpu,tpu`` narrows which installed backends are selected (default: all).
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import os

from stevedore import DriverManager, ExtensionManager
from stevedore.exception import NoMatches

from pjrtkit.backend import Backend
from pjrtkit.errors import BackendLoadFailure, FailedPrecondition, PluginContractError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "pjrtkit.backends"
SELECT_VARIABLE = "PJRTKIT_BACKENDS"


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


def discover(select: set[str] | None = None) -> list[BackendStatus]:
    """Every installed backend with its status; loads and checks the selected ones."""
    if select is None:
        select = selected_names()
    failures: dict[str, str] = {}

    def on_load_failure(_manager, entry_point, exc):
        failures[entry_point.name] = (f"import of {entry_point.value} failed: "
                                      f"{type(exc).__name__}: {exc}")

    manager = ExtensionManager(ENTRY_POINT_GROUP, invoke_on_load=False,
                               on_load_failure_callback=on_load_failure)
    statuses: list[BackendStatus] = []
    loaded = {ext.name: ext for ext in manager.extensions}
    entry_points = {ep.name: ep for ep in manager.list_entry_points()}
    for name in sorted(entry_points):
        dist_name, version = _distribution(entry_points[name])
        status = BackendStatus(name, version, dist_name, "ok")
        if select is not None and name not in select:
            status.status = "not selected"
            status.reason = f"{SELECT_VARIABLE}={os.environ.get(SELECT_VARIABLE, '')}"
        elif name in failures:
            status.status, status.reason = "failed", failures[name]
        else:
            try:
                backend = Backend(name, loaded[name].plugin, version)
                _check(backend)
                status.backend = backend
            except FailedPrecondition as exc:
                # The machine lacks what the backend needs (a GPU, a driver): expected, not a
                # broken plugin; `pjrtkit list` says why, JAX start-up stays quiet.
                status.status, status.reason = "unavailable", str(exc)
                log.debug("pjrtkit backend %r is unavailable here: %s", name, exc)
            except Exception as exc:  # noqa: BLE001 - see below
                # Any failure of a third-party plugin is reported in its status, never raised:
                # one broken plugin must not break `import jax` or the listing of the others.
                status.status = "failed"
                status.reason = f"{type(exc).__name__}: {exc}"
        if status.status == "failed":
            log.warning("pjrtkit backend %r (%s %s) is not available: %s", name, dist_name,
                        version, status.reason)
        statuses.append(status)
    return statuses


def load_backend(name: str) -> Backend:
    """Load one backend by name; raises BackendLoadFailure naming the installed ones."""
    try:
        manager = DriverManager(ENTRY_POINT_GROUP, name, invoke_on_load=False)
    except NoMatches:
        installed = sorted(ep.name for ep in ExtensionManager(
            ENTRY_POINT_GROUP, invoke_on_load=False).list_entry_points())
        raise BackendLoadFailure(
            f"no pjrtkit backend named {name!r} is installed; installed: "
            f"{', '.join(installed) or 'none'} (install e.g. pjrtkit-{name})") from None
    except Exception as exc:
        raise BackendLoadFailure(f"pjrtkit backend {name!r} failed to load: "
                                 f"{type(exc).__name__}: {exc}") from exc
    dist_name, version = _distribution(manager.extensions[0].entry_point)
    try:
        return Backend(name, manager.driver, version)
    except PluginContractError:
        raise  # already names the backend, the hook and the fix
    except Exception as exc:
        raise BackendLoadFailure(f"pjrtkit backend {name!r} failed to start: "
                                 f"{type(exc).__name__}: {exc}") from exc
