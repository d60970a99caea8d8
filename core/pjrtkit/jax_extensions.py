"""What pjrtkit adds to JAX for each platform it registers, in one call from ``jax_glue``.

- lowering rules (``pjrtkit.jax_lowering``): host callbacks and ``lax.platform_dependent``,
  and the rules the plugin contributes (``pjrtkit_jax_lowering_rules``: eigh, svd, ...);
- eager ``jax.debug.callback`` / ``jax.debug.print`` on platforms like cpu without JAX's cpu
  (``pjrtkit.jax_callbacks.extend_eager_callbacks``);
- DLPack (``pjrtkit.jax_dlpack``) for platforms whose buffers live in host memory, i.e. those
  that declare themselves like JAX's cpu;
- physical device meshes (``jax_compat.extend_device_mesh``) for platforms whose devices are
  laid out like TPUs (``PlatformInfo.device_mesh_like``).
"""
from __future__ import annotations

from pjrtkit import jax_callbacks, jax_compat, jax_dlpack, jax_lowering


def extend_jax_for(backend) -> None:
    """Everything JAX needs beyond ``register_plugin`` to run programs on ``backend``."""
    info = backend.platform
    jax_lowering.register_lowerings(
        info.name, jax_lowering.platform_lowerings(info.name, info.like_platform))
    jax_lowering.register_platform_lowering_rules(backend)
    jax_callbacks.extend_eager_callbacks(info.name, info.like_platform)
    if info.like_platform == "cpu":
        jax_dlpack.extend_dlpack(info.name)
    if info.device_mesh_like is not None:
        jax_compat.extend_device_mesh(info.name, info.device_mesh_like)
