"""The JAX lowering rule that lets ``pl.pallas_call`` lower on pjrtkit_cuda / pjrtkit_rocm.

JAX's rule for ``pallas_call`` picks its GPU lowering by platform name (``cuda``, ``rocm``;
``mlir.lower_per_platform``) and has none for other platforms. This rule, registered for our
platforms through ``pjrtkit_jax_lowering_rules``, runs JAX's own rule as if lowering for the
vendor's JAX platform (``cuda`` for pjrtkit_cuda, ``rocm`` for pjrtkit_rocm: Pallas's Triton
lowering picks libdevice or ocml math by that name), so a kernel with Triton compiler params
becomes the custom call ``lowering.pallas`` compiles, and ``interpret=True`` keeps lowering to
ordinary ops. jax 0.12's lowering also asks which GPU the device is; the rule tells it
(``jax_compat.register_pallas_gpu``): the device's architecture, or under emulation, where
the kernel is lowered but cannot run, the vendor's representative target.
JAX-private (``jax._src.pallas``): listed in tests/test_jax_compat.py.
"""
from __future__ import annotations

from pjrtkit.types import JaxLoweringRule

# The JAX platform whose Pallas lowering each vendor's kernels take.
JAX_PLATFORM = {"cuda": "cuda", "hip": "rocm"}
# The target an emulated device's kernels are lowered for (the compile report's main ones).
EMULATED_TARGET = {"cuda": "sm_90", "hip": "gfx942"}


def pallas_lowering_rules(vendor: str, devices=()) -> list[JaxLoweringRule]:
    """``[JaxLoweringRule(pallas_call_p, rule)]``; empty when this JAX has no Pallas.
    ``devices``: the driver's ``DeviceFacts`` (kind and architecture of each GPU)."""
    try:
        from jax._src.pallas import pallas_call
    except ImportError:
        return []
    from pjrtkit import jax_compat

    platform = JAX_PLATFORM[vendor]
    supported = jax_compat.pallas_triton_supported()
    for facts in devices:
        target = facts.arch if facts.arch != "emulated" else EMULATED_TARGET[vendor]
        jax_compat.register_pallas_gpu(facts.name, target)

    def lower_pallas_call_as_vendor(ctx, *args, **params):
        if not supported and not params.get("interpret"):
            version = jax_compat.installed_versions()["jax"]
            raise NotImplementedError(
                f"pjrtkit_{platform}: pl.pallas_call kernels for GPUs compile with jax 0.10.x "
                f"and 0.12.x; jax {version} lowers them in a form pjrtkit does not compile "
                f"(interpret=True runs them as ordinary ops)")
        rule = pallas_call._pallas_call_lowering  # noqa: SLF001 - JAX's own rule, no public name
        return rule(ctx.replace(platforms=(platform,)), *args, **params)

    return [JaxLoweringRule(pallas_call.pallas_call_p, lower_pallas_call_as_vendor)]
