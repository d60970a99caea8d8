"""Sharded training of a small transformer on a virtual TPU v5e-8 (pjrtkit_tpu), against the
same program on XLA's CPU backend with 8 devices, with the per-chip memory report.

What it shows: the decoder-only transformer of ``transformer_train.py`` (same model, data and
AdamW step, imported from it) trained data-parallel over a Mesh of 8 devices made by
``mesh_utils.create_device_mesh`` (on pjrtkit_tpu the physical v5e ring order real TPUs get):
the batch is sharded over the ``data`` axis, parameters and optimizer state replicated, and
XLA's SPMD partitioner makes the per-device program (the gradient all-reduce included) on both.
pjrtkit_tpu computes as a TPU does: float32 matmuls at DEFAULT precision are one bfloat16 pass
with float32 accumulation, so the losses agree within a TPU tolerance, not float32's:
``TOLERANCE`` = 2e-3 relative. Each bf16 operand is rounded by up to 2**-9 relative; over a
contraction the roundings mostly cancel, and the loss moved by 1.8e-4 at most in 10 steps
(seed 0), so 2e-3 leaves a tenfold margin while float32's 1e-4 of transformer_train.py would
not hold.

Then it prints, per chip: HBM in use, peak and limit (``device.memory_stats()``), the step's
compiled memory (``memory_analysis()``, TPU tile padding included) and a roofline estimate from
its ``cost_analysis()`` (``pjrtkit_tpu.roofline``). ``roofline_step`` is also a target of the
roofline command:

    .venv/bin/python examples/tpu_transformer.py --steps 10
    .venv/bin/python -m pjrtkit_tpu.roofline examples/tpu_transformer.py:roofline_step

Exit status: 0 PASS, 1 FAIL, 2 a backend could not be started.
"""
from __future__ import annotations

import argparse
import sys

import jax
import numpy as np

import transformer_train as model

PLATFORM = "pjrtkit_tpu"
REFERENCE_PLATFORM = "cpu"
DEVICES = 8
BATCH = 16  # two sequences per device
TOLERANCE = 2e-3


def shardings(devices):
    from jax.experimental import mesh_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(mesh_utils.create_device_mesh((len(devices),), devices), ("data",))
    return NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("data"))


def sharded_step(devices):
    replicated, by_batch = shardings(devices)
    return jax.jit(model.train_step, in_shardings=(replicated, by_batch),
                   out_shardings=(replicated, replicated)), replicated, by_batch


def initial_state(seed: int):
    rng = np.random.default_rng(seed)
    params = model.init_params(rng)
    zeros = jax.tree.map(np.zeros_like, params)
    state = {"params": params, "m": zeros, "v": zeros, "count": np.zeros((), np.int32)}
    return state, rng


def batches(rng, steps: int):
    return [{k: np.concatenate([a[k], b[k]]) for k in a}
            for a, b in zip(model.make_batches(rng, steps), model.make_batches(rng, steps))]


def roofline_step(devices):
    """For ``python -m pjrtkit_tpu.roofline``: the step and its arguments, as shapes."""
    step, replicated, by_batch = sharded_step(devices)
    state, rng = initial_state(0)
    batch = batches(rng, 1)[0]

    def spec(x, sharding):
        return jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype, sharding=sharding)

    return step, (jax.tree.map(lambda x: spec(x, replicated), state),
                  jax.tree.map(lambda x: spec(x, by_batch), batch))


def train(devices, steps: int, seed: int):
    step, replicated, by_batch = sharded_step(devices)
    state, rng = initial_state(seed)
    state = jax.device_put(state, replicated)
    losses = []
    for batch in batches(rng, steps):
        state, loss = step(state, jax.device_put(batch, by_batch))
        losses.append(float(loss))
    return losses, step, state


def memory_report(devices, step, state) -> list[str]:
    from pjrtkit_tpu.generations import generation_of_kind
    from pjrtkit_tpu.roofline import of_compiled

    _, by_batch = shardings(devices)
    rng = np.random.default_rng(0)
    batch = jax.device_put(batches(rng, 1)[0], by_batch)
    compiled = step.lower(state, batch).compile()
    analysis = compiled.memory_analysis()
    gib = 1 << 30
    lines = ["per-chip memory (HBM):",
             f"  {'device':<28} {'in use':>12} {'peak':>12} {'limit':>12}"]
    for d in devices:
        stats = d.memory_stats()
        lines.append(f"  {str(d):<28} {stats['bytes_in_use'] / gib:>10.4f}Gi "
                     f"{stats['peak_bytes_in_use'] / gib:>10.4f}Gi "
                     f"{stats['bytes_limit'] / gib:>10.2f}Gi")
    lines.append(f"  one training step per device: arguments {analysis.argument_size_in_bytes}"
                 f" B, outputs {analysis.output_size_in_bytes} B, temporaries (estimated) "
                 f"{analysis.temp_size_in_bytes} B (TPU tile padding included)")
    roofline = of_compiled(compiled, generation_of_kind(devices[0].device_kind), len(devices))
    lines.extend(roofline.describe().splitlines())
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    jax.config.update("jax_platforms", f"{PLATFORM},{REFERENCE_PLATFORM}")
    jax.config.update("jax_num_cpu_devices", DEVICES)
    try:
        tpu = jax.devices(PLATFORM)
        cpu = jax.devices(REFERENCE_PLATFORM)
    except RuntimeError as exc:
        print(f"a backend could not be started: {exc}")
        return 2
    if len(tpu) != DEVICES or len(cpu) != DEVICES:
        print(f"need {DEVICES} devices on each platform (PJRTKIT_TPU_TOPOLOGY a v5e-8), got "
              f"{len(tpu)} {PLATFORM} and {len(cpu)} {REFERENCE_PLATFORM}")
        return 2
    print(f"transformer, data-parallel over {DEVICES} devices: {tpu[0].device_kind} "
          f"({PLATFORM}) vs XLA {REFERENCE_PLATFORM}; tolerance {TOLERANCE:g} relative")
    ours, step, state = train(tpu, args.steps, args.seed)
    reference, _, _ = train(cpu, args.steps, args.seed)
    worst = 0.0
    print(f"{'step':>4} {PLATFORM:>14} {'xla cpu':>14} {'rel diff':>10}")
    for i, (a, b) in enumerate(zip(ours, reference)):
        diff = abs(a - b) / max(abs(b), 1e-6)
        worst = max(worst, diff if np.isfinite(a) else np.inf)
        print(f"{i:>4} {a:>14.6f} {b:>14.6f} {diff:>10.2e}")
    for line in memory_report(tpu, step, state):
        print(line)
    if not worst <= TOLERANCE:
        print(f"FAIL: max relative difference {worst:.2e} exceeds {TOLERANCE:g}")
        return 1
    if not ours[-1] < ours[0]:
        print(f"FAIL: the loss did not go down ({ours[0]:.4f} -> {ours[-1]:.4f})")
        return 1
    print(f"PASS: {args.steps} steps, max relative difference {worst:.2e} <= {TOLERANCE:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
