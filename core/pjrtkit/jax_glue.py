"""The ``jax_plugins`` entry point: registers every selected pjrtkit backend with JAX.

JAX calls ``initialize()`` at the first use of a backend (not at ``import jax``). Each backend
registers below XLA's cpu priority, so installing a plugin never changes JAX's default backend;
users opt in with ``JAX_PLATFORMS=pjrtkit_cpu``.

JAX keeps allowlists keyed by platform name that a new platform is missing from. They are
extended here, in one place, and ``tests/test_jax_glue.py`` fails loudly when a JAX upgrade
moves them.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

# Below XLA's cpu (0): a pjrtkit backend is never the default backend.
PRIORITY = -100

_registered: dict[str, object] = {}


def allow_donation(platform: str) -> None:
    """Buffer donation: JAX only emits donation for platforms in this module-level list."""
    from jax._src.interpreters import mlir

    if platform not in mlir._platforms_with_donation:
        mlir._platforms_with_donation.append(platform)


def register_backend(backend) -> None:
    """Register one loaded backend with JAX under its platform name."""
    from jax._src import xla_bridge

    from pjrtkit import jax_extensions
    from pjrtkit.abi.api import register_backend as make_c_api

    if backend.platform_name in _registered:
        return
    capsule, _slot = make_c_api(backend)
    xla_bridge.register_plugin(backend.platform_name, priority=PRIORITY, c_api=capsule)
    allow_donation(backend.platform_name)
    jax_extensions.extend_jax_for(backend)
    _registered[backend.platform_name] = backend


def initialize() -> None:
    """Called by JAX through the ``jax_plugins`` entry point."""
    from pjrtkit import discovery

    for status in discovery.discover():
        if status.ok:
            try:
                register_backend(status.backend)
            except Exception as exc:  # never break `import jax` for other users
                log.warning("pjrtkit backend %r could not register with JAX: %s: %s",
                            status.name, type(exc).__name__, exc)


def registered_backends() -> dict[str, object]:
    return dict(_registered)
