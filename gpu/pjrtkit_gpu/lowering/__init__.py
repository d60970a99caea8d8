"""The GPU lowering: StableHLO op name -> rule, one registry both GPU plugins compile with.

``RULES`` holds every rule (``pjrtkit.lowering`` alone, not the NumPy reference: payloads are
``DeviceArray``s). Its dtypes include the complex and narrow types only as stored bytes: the
core's expansions rewrite every op on them (the plugin declares its primitive set), so the
rules see them only in ``stablehlo.bitcast_convert`` and in custom calls that move bytes;
``registry_for(driver, device, platform)`` is it with the ``GpuPayloads`` of
one compile. An op without a rule, or a dtype a rule lacks, is UNIMPLEMENTED at compile time
naming both.
"""
from __future__ import annotations

from pjrtkit.lowering.approx_top_k import approx_top_k
from pjrtkit.callbacks import HOST_CALLBACK_TARGET, make_host_callback_rule
from pjrtkit.expansions.formats import STORED_ONLY
from pjrtkit.lowering.dce_sink import dce_sink
from pjrtkit.lowering.registry import LoweringRegistry, custom_call_rule
from pjrtkit.types import PrimitiveSet

from pjrtkit_gpu import dtypes
from pjrtkit_gpu.lowering.control_flow import CONTROL_FLOW_RULES
from pjrtkit_gpu.lowering.dot import DOT_RULES
from pjrtkit_gpu.lowering.elementwise import ELEMENTWISE_RULES
from pjrtkit_gpu.lowering.indexing import INDEXING_RULES
from pjrtkit_gpu.lowering.pallas import PALLAS_RULES
from pjrtkit_gpu.lowering.payloads import GpuPayloads
from pjrtkit_gpu.lowering.reduce import REDUCE_RULES
from pjrtkit_gpu.lowering.sort import SORT_RULES
from pjrtkit_gpu.lowering.structural import STRUCTURAL_RULES
from pjrtkit_gpu.lowering.windowed import WINDOWED_RULES



def _device_copies(ctx):
    """A host callback's copies on the device the program is compiled for: operands to the host
    before the call, results back after it (the driver waits for the device's stream), and an
    empty array as a token."""
    driver, device = ctx.payloads.driver, ctx.payloads.device_index
    return (driver.to_host, lambda array: driver.from_host(device, array),
            driver.empty(device, (0,), dtypes.BOOL))


# jax.pure_callback / io_callback / debug.print: the core's rule with device copies.
HOST_CALLBACK = make_host_callback_rule(transfers=_device_copies)

RULES = LoweringRegistry("pjrtkit_gpu", {**ELEMENTWISE_RULES, **STRUCTURAL_RULES, **REDUCE_RULES,
                                         **DOT_RULES, **CONTROL_FLOW_RULES, **INDEXING_RULES,
                                         **WINDOWED_RULES, **SORT_RULES,
                                         **PALLAS_RULES,
                                         custom_call_rule("ApproxTopK"): approx_top_k,
                                         custom_call_rule("dce_sink"): dce_sink,
                                         custom_call_rule(HOST_CALLBACK_TARGET): HOST_CALLBACK},
                         dtypes=(*dtypes.SUPPORTED, *STORED_ONLY))


# What the rules implement themselves (``pjrtkit_primitive_set``): the types they compute on,
# not the ones they only store.
PRIMITIVES = PrimitiveSet(ops=RULES.op_names, dtypes={d.name for d in dtypes.SUPPORTED},
                          custom_call_targets=RULES.custom_call_targets)


def registry_for(driver, device_index: int, platform: str,
                 vendor: str | None = None) -> LoweringRegistry:
    """``RULES`` for one compile on ``device_index``; ``vendor`` lets the dot rule use that
    vendor's libraries (``pjrtkit_gpu.vendor``; None: the Triton kernels only)."""
    return RULES.merged({}, backend=platform,
                        payloads=GpuPayloads(driver, device_index, platform, vendor))
