"""``jax.export`` on a pjrtkit platform: what was exported for the platform it is like.

A serialized export is how a JAX model ships: ``jax.export.export(f, platforms=("cpu",))``
writes StableHLO lowered with JAX's cpu rules, and ``Exported.call`` checks, by name, that the
platform it runs on is one of the export's platforms. A plugin that declares itself like a
built-in platform (``PlatformInfo.like_platform``: pjrtkit_cpu like ``cpu``, pjrtkit_tpu like
``tpu``) runs what was exported for that platform:

``Exported.call`` on the pjrtkit platform lowers with JAX's own rule, told that the lowering
platform is the like platform when the export does not name the pjrtkit platform itself (a
multi-platform export picks the like platform's branch, as on that platform).

Exporting is JAX's own: ``jax.export.export(f)`` without ``platforms`` exports for the default
backend's platform name (``pjrtkit_cpu``, an artifact for pjrtkit_cpu alone); ``platforms=("cpu",)``
makes the portable cpu artifact that XLA and pjrtkit_cpu both run. Not changed on purpose:
JAX answers ``default_export_platform()`` from the backends it starts on that very call, so a
different answer could only be given from the second call on.

An exported module lowered for cpu holds JAX's cpu custom calls (LAPACK's FFI targets,
``lapack_sgetrf_ffi`` ...); the plugin implements them or refuses them as UNIMPLEMENTED naming
the target at compile time. The JAX internals used are in ``jax_compat`` (tests/test_jax_compat.py
fails when JAX moves them; JAX's export_test measures the behaviour).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pjrtkit import jax_compat


def as_like_platforms(lowering_platforms: tuple[str, ...], exported_platforms: tuple[str, ...],
                      platform: str, like_platform: str) -> tuple[str, ...]:
    """``lowering_platforms`` with ``platform`` renamed ``like_platform`` when the export was
    made for the like platform and not for ``platform`` itself."""
    if platform in exported_platforms or like_platform not in exported_platforms:
        return lowering_platforms
    return tuple(like_platform if name == platform else name for name in lowering_platforms)


def exported_call_lowerings(platform: str, like_platform: str | None) -> dict[Any, Callable]:
    """The rule of ``Exported.call`` on ``platform``; none if it is like nothing."""
    if like_platform is None:
        return {}
    primitive, jax_rule = jax_compat.exported_call_rule()

    def call_exported(ctx, *args, exported, **params):
        platforms = tuple(ctx.module_context.platforms)
        renamed = as_like_platforms(platforms, jax_compat.exported_platforms(exported), platform,
                                    like_platform)
        if renamed == platforms:
            return jax_rule(ctx, *args, exported=exported, **params)
        renamed_ctx = jax_compat.with_lowering_platforms(ctx, renamed)
        results = jax_rule(renamed_ctx, *args, exported=exported, **params)
        if renamed_ctx.tokens_out is not None:  # an export with ordered effects threads tokens
            ctx.set_tokens_out(renamed_ctx.tokens_out)
        return results

    return {primitive: call_exported}
