"""HBM verdicts and sizes on a compile-only v5e-8 (``python hbm_cases.py <platform>`` prints
JSON): padded array sizes, and programs whose per-device memory is about 85% and 115% of
v5e's 15.75 GiB, compiled by libtpu (platform ``tpu``) or pjrtkit_tpu; nothing is allocated."""
from __future__ import annotations

import json
import sys

GIB = 1 << 30
V5E_HBM = int(15.75 * GIB)
DEVICES = 8

# (dtype, shape) whose padded size is compared with memory_analysis().argument_size_in_bytes.
PADDING_CASES = [
    ("float32", ()), ("float32", (3,)), ("float32", (1000,)), ("float32", (3000,)),
    ("float32", (3, 5)), ("float32", (9, 130)), ("float32", (17, 3)), ("float32", (2, 3, 5)),
    ("float32", (1024, 1024)), ("bfloat16", (9, 130)), ("bfloat16", (1000,)),
    ("bfloat16", (64, 100)), ("int8", (9, 130)), ("int8", (3, 5)), ("bool", (1000,)),
    ("float32", (7, 33, 200)), ("bfloat16", (5, 257)), ("int32", (4, 1, 1)),
]


def _rows(fraction: float, bytes_per_row: int, arrays: int, fixed: int = 0) -> int:
    """Rows per device so that ``arrays`` sharded arrays of ``bytes_per_row`` plus ``fixed``
    bytes take ``fraction`` of v5e's HBM."""
    return int((fraction * V5E_HBM - fixed) / (arrays * bytes_per_row))


def programs():
    """(label, function, [(dtype, global shape, sharded?)])"""
    import jax.numpy as jnp

    out = []
    for fraction in (0.85, 1.15):
        rows = _rows(fraction, 4096 * 4, 2)
        out.append((f"elementwise f32 {fraction:.2f}", lambda x: x * 2 + 1,
                    [("float32", (DEVICES * rows, 4096), True)]))
        rows = _rows(fraction, 4096 * 4, 2, fixed=4096 * 4096 * 4)
        out.append((f"matmul f32 {fraction:.2f}", lambda a, w: jnp.tanh(a @ w),
                    [("float32", (DEVICES * rows, 4096), True),
                     ("float32", (4096, 4096), False)]))
        # (rows, 3, 5) is laid out with rows minor and 3 padded to 4 (20 elements a row, not
        # 15): unpadded this is 0.64 or 0.86 of HBM (a plain byte count says it fits), padded
        # 0.85 or 1.15.
        rows = _rows(fraction, 4 * 5 * 2, 2)
        out.append((f"padded bf16 {fraction:.2f}", lambda x: x + 1,
                    [("bfloat16", (DEVICES * rows, 3, 5), True)]))
    return out


def report(platform: str) -> dict:
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

    topology = topologies.get_topology_desc("v5e:2x4", platform, chips_per_host_bounds=(2, 4, 1))
    devices = topology.devices
    mesh = Mesh(devices, ("x",))
    out = {"padding": [], "programs": {}}
    one = SingleDeviceSharding(devices[0])
    for dtype, shape in PADDING_CASES:
        arg = jax.ShapeDtypeStruct(shape, jnp.dtype(dtype), sharding=one)
        analysis = jax.jit(lambda x: x).lower(arg).compile().memory_analysis()
        out["padding"].append(int(analysis.argument_size_in_bytes))
    for label, fn, arguments in programs():
        args = [jax.ShapeDtypeStruct(shape, jnp.dtype(dtype), sharding=NamedSharding(
                    mesh, PartitionSpec("x") if sharded else PartitionSpec()))
                for dtype, shape, sharded in arguments]
        try:
            compiled = jax.jit(fn).lower(*args).compile()
            analysis = compiled.memory_analysis()
            cost = compiled.cost_analysis()
            cost = cost[0] if isinstance(cost, list) else cost
            out["programs"][label] = {
                "fits": True, "arguments": int(analysis.argument_size_in_bytes),
                "outputs": int(analysis.output_size_in_bytes),
                "temporaries": int(analysis.temp_size_in_bytes),
                "cost": {k: float(cost.get(k, 0.0)) for k in ("flops", "bytes accessed")}}
        except Exception as exc:  # noqa: BLE001 - the refusal is the measurement
            out["programs"][label] = {"fits": False, "error": str(exc)[:600]}
    return out


if __name__ == "__main__":
    print("REPORT " + json.dumps(report(sys.argv[1])))
