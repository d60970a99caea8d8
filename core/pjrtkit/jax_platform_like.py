"""``lax.platform_dependent`` on a pjrtkit platform: the branch of the platform it is like.

A plugin declares the built-in JAX platform it behaves like (``PlatformInfo.like_platform``:
pjrtkit_cpu computes on the host with XLA's CPU numerics, so it says ``"cpu"``). Then
``platform_dependent(x, cpu=f, default=g)`` runs ``f`` on it; a branch named after the pjrtkit
platform itself (``pjrtkit_cpu=h``) still wins.

How far "like" goes, by design: only the choice of a ``platform_dependent`` branch. Every
primitive, inside the chosen branch too, is lowered with the pjrtkit platform's rules (JAX's
generic rules plus the ones pjrtkit registers), never with JAX's cpu-only rules, whose custom
calls (LAPACK, XLA's Python-callback target) only XLA's runtime implements. A primitive that
needs a platform rule gets its own pjrtkit rule instead (``pjrtkit.jax_lowering``).

``platform_dependent`` lowers through two primitives that must agree on the branch:
``platform_index`` (which branch) and ``cond`` with ``branches_platforms`` (which branches to
keep). Both rules here are JAX's own, called with the branch platforms rewritten so that the
like platform's branch also names the pjrtkit platform. Written against jax 0.10.2.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The platforms a plugin may say it is like: JAX's built-in lowering platforms.
BUILTIN_PLATFORMS = frozenset({"cpu", "cuda", "rocm", "tpu"})

BranchPlatforms = tuple  # tuple[tuple[str, ...] | None, ...]: None is the default branch


def with_like_platform(branches_platforms: BranchPlatforms, platform: str,
                       like_platform: str) -> BranchPlatforms:
    """``branches_platforms`` with ``platform`` added to the branch of ``like_platform``,
    unless some branch names ``platform`` itself."""
    if any(names is not None and platform in names for names in branches_platforms):
        return branches_platforms
    return tuple(names if names is None or like_platform not in names else (*names, platform)
                 for names in branches_platforms)


def _generic_rule(primitive) -> Callable[..., Any]:
    """JAX's platform-independent lowering rule of ``primitive`` (JAX 0.10.2 internals)."""
    from jax._src.interpreters import mlir

    return mlir._lowerings[primitive].rule  # noqa: SLF001 - JAX has no public accessor


def platform_choice_lowerings(platform: str, like_platform: str | None) -> dict[Any, Callable]:
    """Rules for ``platform_index`` and ``cond`` on ``platform``; none if it is like nothing."""
    if like_platform is None:
        return {}
    if like_platform not in BUILTIN_PLATFORMS:
        raise ValueError(f"{platform}: like_platform {like_platform!r} is not a JAX platform; "
                         f"use one of {sorted(BUILTIN_PLATFORMS)} or None")
    from jax._src.lax.control_flow import conditionals

    index_rule = _generic_rule(conditionals.platform_index_p)
    cond_rule = _generic_rule(conditionals.cond_p)

    def platform_index(ctx, *args, platforms, **params):
        return index_rule(ctx, *args, **params,
                          platforms=with_like_platform(platforms, platform, like_platform))

    def cond(ctx, *args, **params):
        branches_platforms = params.get("branches_platforms")
        if branches_platforms is not None:
            params["branches_platforms"] = with_like_platform(branches_platforms, platform,
                                                              like_platform)
        return cond_rule(ctx, *args, **params)

    return {conditionals.platform_index_p: platform_index, conditionals.cond_p: cond}
