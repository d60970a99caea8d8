"""JAX lowering rules for pjrtkit platforms, registered right after the platform exists.

JAX picks a lowering rule by platform name, and ``mlir.register_lowering(..., platform=NAME)``
refuses a NAME that is not registered yet, so these rules are installed right after
``register_plugin`` (``jax_glue.register_backend``). Two sources, one place that registers:
- the core's own, for every pjrtkit platform (``platform_lowerings``): host callbacks
  (``pjrtkit.jax_callbacks``: JAX's callback lowering exists only for its built-in platforms)
  and ``lax.platform_dependent`` (``pjrtkit.jax_platform_like``: the branch of the built-in
  platform the plugin declares itself like, ``PlatformInfo.like_platform``);
- the plugin's (``pjrtkit_jax_lowering_rules``, ``register_platform_lowering_rules``): primitives
  JAX lowers only on its own platforms (eigh, svd, eig, schur, ...), for which JAX would raise
  "MLIR translation rule for primitive ... not found" before the program reaches the plugin.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from pjrtkit import jax_callbacks, jax_export, jax_platform_like

log = logging.getLogger(__name__)


def platform_lowerings(platform: str, like_platform: str | None) -> Mapping[Any, Callable]:
    """Every JAX lowering rule pjrtkit contributes for ``platform``, keyed by primitive."""
    rules: dict[Any, Callable] = {}
    rules.update(jax_callbacks.callback_lowerings(platform, like_platform))
    rules.update(jax_platform_like.platform_choice_lowerings(platform, like_platform))
    rules.update(jax_export.exported_call_lowerings(platform, like_platform))
    return rules


def register_lowerings(platform: str, rules: Mapping[Any, Callable]) -> None:
    """Register ``rules`` (primitive -> JAX lowering rule) for ``platform``.

    JAX's lowering cache lives for one module, so a cached callback lowering reuses a key only
    inside the program whose keepalives hold it.
    """
    from jax.interpreters import mlir

    for primitive, rule in rules.items():
        mlir.register_lowering(primitive, rule, platform=platform)


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
