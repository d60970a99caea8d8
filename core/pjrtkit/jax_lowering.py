"""Registers the JAX lowering rules a backend contributes (``pjrtkit_jax_lowering_rules``).

JAX lowers some primitives (eigh, svd, eig, schur, ...) only on its own platforms; on a
pjrtkit platform it raises "MLIR translation rule for primitive ... not found" before the
program reaches the plugin. A plugin therefore hands JAX a rule per such primitive, and the
core registers them for the plugin's platform name. JAX accepts a rule for a platform only
once the platform is registered, so this runs right after ``register_plugin``.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def register_platform_lowering_rules(backend) -> int:
    """Register every rule ``backend`` contributes for its platform; the number registered.

    A failing hook or rule is logged and skipped: the platform stays usable, and only programs
    with the primitives concerned fail (with JAX's own "rule not found" error).
    """
    from jax.interpreters import mlir

    from pjrtkit.errors import PjrtError

    try:
        records = backend.jax_lowering_rules()
    except PjrtError as exc:  # the facade turns every other exception into Internal
        log.warning("%s: no JAX lowering rules registered: %s: %s", backend.platform_name,
                    type(exc).__name__, exc)
        return 0
    registered = 0
    for record in records:
        try:
            mlir.register_lowering(record.primitive, record.rule, platform=backend.platform_name)
        except (NotImplementedError, ValueError, TypeError) as exc:  # JAX: unknown platform
            log.warning("%s: JAX lowering rule for %s not registered: %s: %s",
                        backend.platform_name, record.primitive, type(exc).__name__, exc)
        else:
            registered += 1
    return registered
