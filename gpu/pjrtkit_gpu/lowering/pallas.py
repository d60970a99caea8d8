"""``stablehlo.custom_call @__gpu$xla.gpu.triton``: a Pallas kernel (``pl.pallas_call`` with
Triton compiler params, lowered by JAX's own Pallas Triton lowering for our platforms through
``jax_pallas``), compiled by Triton for the device's architecture on first launch and launched
through the driver like the lowering's own kernels (``triton_ir``).

A call without a readable kernel in its backend_config is INVALID_ARGUMENT (the target is
known, the call is malformed). Under emulation a well-formed one is UNIMPLEMENTED at compile
time: Triton's interpreter runs Python kernels, and a Pallas kernel reaches the plugin as
Triton IR, which nothing here can interpret.
"""
from __future__ import annotations

from pjrtkit.errors import InvalidArgument
from pjrtkit.lowering.registry import custom_call_rule

from pjrtkit_gpu.lowering.structural import check_operands
from pjrtkit_gpu.triton_ir import PALLAS_TRITON_TARGET, kernel_from_backend_config


def pallas_triton_call(op, ctx):
    check_operands(op, ctx)
    driver, device = ctx.payloads.driver, ctx.payloads.device_index
    config = op.attributes.get("mhlo.backend_config")
    if not isinstance(config, dict):
        raise InvalidArgument(f"custom_call @{PALLAS_TRITON_TARGET} without a dictionary "
                              f"backend_config holding the Triton kernel (the form Pallas "
                              f"emits with jax 0.10 and 0.12): {op.describe()}")
    name = config.get("name", "?")
    try:
        kernel = kernel_from_backend_config(config)
    except (KeyError, ValueError) as exc:
        raise InvalidArgument(f"custom_call @{PALLAS_TRITON_TARGET}: Pallas Triton kernel "
                              f"'{name}' has an unreadable backend_config ({type(exc).__name__}: "
                              f"{exc}): {op.describe()}") from None
    if driver.interprets:
        raise ctx.unimplemented(
            op, f"Pallas Triton kernel '{name}' (custom call {PALLAS_TRITON_TARGET}) under "
                f"emulation (PJRTKIT_GPU_EMULATE=1): it "
                f"arrives as compiled Triton IR, which Triton's interpreter cannot run (it runs "
                f"Python kernels); run it on a GPU, or use pl.pallas_call(..., interpret=True)")
    # input_output_aliases: the output starts as a copy of its operand (the kernel may write
    # only part of it); results are always fresh memory here (DeviceArray's rule).
    aliased = {(alias.output_tuple_indices or (0,))[0]: alias.operand_index
               for alias in op.attributes.get("output_operand_aliases") or ()}
    outs = [v.type for v in op.results]

    def run_pallas_kernel(*operands):
        results = tuple(driver.duplicate(operands[aliased[k]]) if k in aliased
                        else driver.empty(device, t.shape, t.dtype) for k, t in enumerate(outs))
        driver.launch(device, kernel, kernel.grid, [*operands, *results], {})
        return results

    return run_pallas_kernel


PALLAS_RULES = {custom_call_rule(PALLAS_TRITON_TARGET): pallas_triton_call}
