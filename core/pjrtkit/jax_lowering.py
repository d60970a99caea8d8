"""JAX lowering rules pjrtkit registers for each of its platforms, after the platform exists.

JAX picks a lowering rule by platform name, and ``mlir.register_lowering(..., platform=NAME)``
refuses a NAME that is not registered yet, so these rules are installed right after
``register_plugin`` (``jax_glue.register_backend``). Every source of platform rules adds its
table to ``platform_lowerings``; this module is the one place that registers them.

Which rules, and why a pjrtkit platform needs its own:
- host callbacks (``pjrtkit.jax_callbacks``): JAX's callback lowering exists only for its
  built-in platforms;
- ``lax.platform_dependent`` (``pjrtkit.jax_platform_like``): takes the branch of the built-in
  platform the plugin declares itself like (``PlatformInfo.like_platform``).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pjrtkit import jax_callbacks, jax_platform_like


def platform_lowerings(platform: str, like_platform: str | None) -> Mapping[Any, Callable]:
    """Every JAX lowering rule pjrtkit contributes for ``platform``, keyed by primitive."""
    rules: dict[Any, Callable] = {}
    rules.update(jax_callbacks.callback_lowerings(platform, like_platform))
    rules.update(jax_platform_like.platform_choice_lowerings(platform, like_platform))
    return rules


def register_lowerings(platform: str, rules: Mapping[Any, Callable]) -> None:
    """Register ``rules`` (primitive -> JAX lowering rule) for ``platform``.

    JAX's lowering cache lives for one module, so a cached callback lowering reuses a key only
    inside the program whose keepalives hold it.
    """
    from jax._src.interpreters import mlir

    for primitive, rule in rules.items():
        mlir.register_lowering(primitive, rule, platform=platform)
