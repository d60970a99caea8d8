"""The topology cases compared with libtpu, and the script that reports them on a platform
(run in a child process: ``python topology_cases.py <platform>`` prints JSON), so that libtpu
(platform ``tpu``) and pjrtkit_tpu each run in a process of their own."""
from __future__ import annotations

import json
import re
import sys

# (generation, name, options): every generation with libtpu's default hosts, single-host
# 8-chip slices and multi-slice.
TOPOLOGY_CASES = [
    ("v4", "v4:2x2x1", {}), ("v4", "v4:2x2x2", {}), ("v4", "v4:2x2x1", {"num_slices": 2}),
    ("v5e", "v5e:2x2", {}), ("v5e", "v5e:2x4", {"chips_per_host_bounds": (2, 4, 1)}),
    ("v5e", "v5e:2x4", {}), ("v5e", "v5e:4x4", {}), ("v5e", "v5e:2x2", {"num_slices": 2}),
    ("v5p", "v5p:2x2x1", {}), ("v5p", "v5p:4x4x4", {}),
    ("v6e", "v6e:2x2", {}), ("v6e", "v6e:2x4", {"chips_per_host_bounds": (2, 4, 1)}),
    ("7x", "tpu7x:2x2x1", {}), ("7x", "tpu7x:2x2x2", {}),
]

# (name, options, mesh shape): what mesh_utils.create_device_mesh makes of each slice.
MESH_CASES = [
    ("v5e:2x4", {"chips_per_host_bounds": (2, 4, 1)}, (8,)),
    ("v5e:2x4", {"chips_per_host_bounds": (2, 4, 1)}, (2, 4)),
    ("v5e:2x4", {"chips_per_host_bounds": (2, 4, 1)}, (4, 2)),
    ("v5e:4x4", {}, (4, 4)), ("v5e:4x4", {}, (2, 8)),
    ("v4:2x2x2", {}, (4, 4)), ("v5p:4x4x4", {}, (4, 16)), ("v5p:4x4x4", {}, (8, 8)),
    ("tpu7x:2x2x2", {}, (2, 8)), ("v6e:2x2", {}, (2, 2)),
]
HYBRID_CASES = [("v5e:2x2", {"num_slices": 2}, (4,), (2,)),
                ("tpu7x:2x2x1", {"num_slices": 2}, (2, 4), (2, 1))]

# One program per generation that cannot fit: libtpu names the HBM it has per device.
HBM_PROBE_ELEMENTS = 200 << 28  # 200 GiB of float32


def report(platform: str) -> dict:
    import jax
    import jax.numpy as jnp
    from jax.experimental import mesh_utils, topologies
    from jax.sharding import SingleDeviceSharding

    def topology(name, options):
        return topologies.get_topology_desc(name, platform, **options)

    out = {"topologies": [], "meshes": [], "hybrid": [], "hbm": {}}
    for _generation, name, options in TOPOLOGY_CASES:
        devices = topology(name, options).devices
        out["topologies"].append([
            [d.id, d.device_kind, list(d.coords), d.core_on_chip, d.process_index,
             getattr(d, "slice_index", None)] for d in devices])
    for name, options, shape in MESH_CASES:
        try:
            mesh = mesh_utils.create_device_mesh(shape, topology(name, options).devices)
            out["meshes"].append([d.id for d in mesh.flat])
        except (NotImplementedError, AssertionError) as exc:  # the same refusal is part of it
            out["meshes"].append(f"{type(exc).__name__}: {str(exc)[:80]}")
    for name, options, shape, dcn in HYBRID_CASES:
        try:
            mesh = mesh_utils.create_hybrid_device_mesh(shape, dcn,
                                                        topology(name, options).devices)
            out["hybrid"].append([d.id for d in mesh.flat])
        except (NotImplementedError, AssertionError) as exc:
            out["hybrid"].append(f"{type(exc).__name__}: {str(exc)[:80]}")
    for generation, name, options in TOPOLOGY_CASES:
        if generation in out["hbm"]:
            continue
        device = topology(name, options).devices[0]
        arg = jax.ShapeDtypeStruct((HBM_PROBE_ELEMENTS,), jnp.float32,
                                   sharding=SingleDeviceSharding(device))
        try:
            jax.jit(lambda x: x + 1).lower(arg).compile()
            out["hbm"][generation] = "fits"
        except Exception as exc:  # noqa: BLE001 - the message is the measurement
            # libtpu: "... exceeds available HBM (15.75G)"; pjrtkit_tpu: "(16911433728 bytes"
            found = re.search(r"exceeds available HBM \(([\d.]+G|\d+ bytes)", str(exc))
            out["hbm"][generation] = found.group(1) if found else str(exc)[:300]
    return out


if __name__ == "__main__":
    print("REPORT " + json.dumps(report(sys.argv[1])))
