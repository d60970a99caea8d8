"""The ``jax_plugins`` entry point: registers every selected pjrtkit backend with JAX.

JAX calls ``initialize()`` at the first use of a backend (not at ``import jax``). Each backend
registers below XLA's cpu priority, so installing a plugin never changes JAX's default backend;
users opt in with ``JAX_PLATFORMS=pjrtkit_cpu``.

Every access to JAX beyond its public API (``register_plugin``, the donation allowlist) goes
through ``pjrtkit.jax_compat``, which ``tests/test_jax_compat.py`` checks against the installed
JAX release.
"""
from __future__ import annotations

import logging

from pjrtkit import jax_compat

log = logging.getLogger(__name__)

# Below XLA's cpu (0): a pjrtkit backend is never the default backend.
PRIORITY = -100

_registered: dict[str, object] = {}


def register_backend(backend) -> None:
    """Register one loaded backend with JAX under its platform name."""
    from pjrtkit import jax_extensions
    from pjrtkit.abi.api import register_backend as make_c_api

    if backend.platform_name in _registered:
        return
    capsule, _slot = make_c_api(backend)
    jax_compat.register_plugin(backend.platform_name, priority=PRIORITY, c_api=capsule)
    jax_compat.extend_allowlists(backend.platform_name)
    jax_extensions.extend_jax_for(backend)
    _registered[backend.platform_name] = backend


def initialize() -> None:
    """Called by JAX through the ``jax_plugins`` entry point."""
    from pjrtkit import discovery

    problem = jax_compat.support_problem()
    if problem:
        log.warning("pjrtkit: %s", problem)
    for status in discovery.discover():
        if status.ok:
            try:
                register_backend(status.backend)
            except Exception as exc:  # never break `import jax` for other users
                log.warning("pjrtkit backend %r could not register with JAX: %s: %s",
                            status.name, type(exc).__name__, exc, exc_info=True)


def registered_backends() -> dict[str, object]:
    return dict(_registered)
