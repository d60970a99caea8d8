"""A per-generation roofline estimate of one compiled program, and the command that prints it.

    python -m pjrtkit_tpu.roofline FILE.py:FUNCTION [--topology v5e:2x4,chips_per_host_bounds=2x4x1]
    pjrtkit-tpu-roofline FILE.py:FUNCTION [--topology ...] [--json]

``FUNCTION(devices)`` receives the devices of a compile-only pjrtkit_tpu topology (build a Mesh
from them) and returns ``(function, args)``: a jitted (or plain) function and its arguments,
``jax.ShapeDtypeStruct`` with shardings or arrays. Nothing runs and nothing is allocated: the
program is compiled for the topology, and its ``cost_analysis()`` (flops, bytes accessed,
transcendentals: per device, of the partitioned program) and ``memory_analysis()`` are set
against the generation's peak bf16 FLOP/s and HBM bandwidth per device (HARDWARE_NOTES.md's
public figures, divided by devices per chip). The estimate is the larger of the compute time
and the memory time, and the program is "compute-bound" or "memory-bound" by which one that
is. It is a roofline, not a simulation: it ignores collectives, overlap and the MXU's shape
efficiency, and prices float32 contractions at the bf16 peak (a TPU's DEFAULT precision;
HIGH and HIGHEST take 3 and 6 passes).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

from pjrtkit_tpu.generations import Generation
from pjrtkit_tpu.topology import DEFAULT_TOPOLOGY, parse_setting


@dataclasses.dataclass(frozen=True)
class Roofline:
    """The estimate for one program on one device of a generation."""

    generation: str
    device_kind: str
    devices: int
    flops: float
    bytes_accessed: float
    transcendentals: float
    compute_seconds: float
    memory_seconds: float
    hbm_bytes: int | None = None
    hbm_limit: int | None = None

    @property
    def seconds(self) -> float:
        return max(self.compute_seconds, self.memory_seconds)

    @property
    def bound(self) -> str:
        return "compute-bound" if self.compute_seconds >= self.memory_seconds else "memory-bound"

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.bytes_accessed if self.bytes_accessed else float("inf")

    def describe(self) -> str:
        lines = [
            f"on {self.generation}-{self.devices} ({self.device_kind}) this step is {self.bound}, "
            f"estimated {self.seconds * 1e3:.3g} ms",
            f"  per device: {self.flops:.4g} flops, {self.bytes_accessed:.4g} bytes accessed, "
            f"{self.transcendentals:.4g} transcendentals "
            f"(arithmetic intensity {self.arithmetic_intensity:.3g} flops/byte)",
            f"  compute {self.compute_seconds * 1e3:.3g} ms, memory "
            f"{self.memory_seconds * 1e3:.3g} ms",
        ]
        if self.hbm_bytes is not None:
            limit = f" of {self.hbm_limit / (1 << 30):.2f} GiB" if self.hbm_limit else ""
            lines.append(f"  HBM per device: {self.hbm_bytes / (1 << 30):.3f} GiB{limit}")
        return "\n".join(lines)


def estimate(cost: dict, generation: Generation, devices: int,
             memory: dict | None = None) -> Roofline:
    """The roofline of a program whose per-device ``cost`` (``compiled.cost_analysis()``) runs
    on ``devices`` devices of ``generation``; ``memory``: ``memory_analysis()`` as a dict."""
    flops = float(cost.get("flops", 0.0))
    nbytes = float(cost.get("bytes accessed", 0.0))
    hbm = None
    if memory is not None:
        hbm = (memory["argument_size_in_bytes"] + memory["output_size_in_bytes"]
               - memory.get("alias_size_in_bytes", 0) + memory["temp_size_in_bytes"])
    return Roofline(
        generation=generation.name, device_kind=generation.device_kind, devices=devices,
        flops=flops, bytes_accessed=nbytes,
        transcendentals=float(cost.get("transcendentals", 0.0)),
        compute_seconds=flops / generation.peak_flops_per_device,
        memory_seconds=nbytes / generation.hbm_bytes_per_s_per_device,
        hbm_bytes=hbm, hbm_limit=generation.hbm_bytes)


def of_compiled(compiled, generation: Generation, devices: int) -> Roofline:
    """The roofline of a ``jax.stages.Compiled`` (for pjrtkit_tpu or any backend)."""
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older JAX: one dict per program
        cost = cost[0]
    analysis = compiled.memory_analysis()
    memory = None if analysis is None else {
        name: int(getattr(analysis, name)) for name in (
            "argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
            "temp_size_in_bytes")}
    return estimate(cost, generation, devices, memory)


def _load(target: str):
    path, sep, name = target.rpartition(":")
    if not sep or not path:
        raise SystemExit(f"expected FILE.py:FUNCTION, got {target!r}")
    # As when the file runs as a script: its own directory is importable.
    sys.path.insert(0, str(Path(path).resolve().parent))
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="pjrtkit-tpu-roofline", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("target", help="FILE.py:FUNCTION; FUNCTION(devices) -> (fn, args)")
    parser.add_argument("--topology", default=DEFAULT_TOPOLOGY,
                        help="a PJRTKIT_TPU_TOPOLOGY value (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the estimate as JSON")
    args = parser.parse_args(argv)

    import jax

    from pjrtkit import jax_compat

    if not jax_compat.backends_are_initialized():
        jax.config.update("jax_platforms", "pjrtkit_tpu,cpu")
    from jax.experimental import topologies

    layout = parse_setting(args.topology)
    options = {"chips_per_host_bounds": layout.chips_per_host_bounds,
               "num_slices": layout.num_slices}
    devices = topologies.get_topology_desc(layout.name, "pjrtkit_tpu", **options).devices
    fn, fn_args = _load(args.target)(devices)
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    compiled = jitted.lower(*fn_args).compile()
    result = of_compiled(compiled, layout.generation, len(devices))
    if args.json:
        print(json.dumps({**dataclasses.asdict(result), "seconds": result.seconds,
                          "bound": result.bound}))
    else:
        print(result.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
