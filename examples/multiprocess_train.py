"""Data-parallel training across processes (jax.distributed), on a pjrtkit backend and on XLA's
CPU backend with the same number of processes, compared step by step. One command:

    .venv/bin/python examples/multiprocess_train.py --processes 2 --steps 10
    .venv/bin/python examples/multiprocess_train.py --processes 4
    .venv/bin/python examples/multiprocess_train.py --launcher mpiexec     # MPI as the engine
    .venv/bin/python examples/multiprocess_train.py --backend pjrtkit_tpu  # a 2-host v5e slice

What it shows: the MLP of mlp_train.py, its parameters replicated over every device of every
process and each global batch split across them (each process builds only its own rows and
hands them over with jax.make_array_from_process_local_data); the sharded jit's gradient
all-reduce crosses processes on pjrtkit's engine (gloo launcher-free; MPI under mpiexec). The
loss of every step must equal XLA's CPU backend's within the example's tolerance (float32:
1e-5 relative; pjrtkit_tpu computes float32 matmuls from bfloat16 as a TPU does: 2e-2).

The command starts the processes itself (or through mpiexec), twice: the backend's job, then
the reference job (JAX_PLATFORMS=cpu, gloo); each process is this file with --worker.
Exit status: 0 PASS, 1 FAIL, 2 a job could not run.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
DEVICES_PER_PROCESS = 2
# pjrtkit_tpu with --processes 2: a v5e 2x4 slice, libtpu's 2x2x1 chips per host: 2 hosts of 4.
TPU_SLICE = "v5e:2x4"


def worker(args) -> int:
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    sys.path.insert(0, str(HERE))
    import mlp_train

    if args.mpi:
        jax.distributed.initialize(cluster_detection_method="mpi4py")
    else:
        jax.distributed.initialize(args.coordinator, num_processes=args.processes,
                                   process_id=args.process_id, initialization_timeout=300)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated, by_rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    experiment = mlp_train.build(args.seed, args.steps)  # same numbers in every process
    state = jax.device_put(experiment.state, replicated)
    step = jax.jit(mlp_train.train_step, out_shardings=(replicated, replicated))
    me, count = jax.process_index(), jax.process_count()
    losses = []
    for batch in experiment.batches:
        rows = len(batch["y"]) // count
        mine = {k: v[me * rows:(me + 1) * rows] for k, v in batch.items()}
        sharded = {k: jax.make_array_from_process_local_data(by_rows, v, batch[k].shape)
                   for k, v in mine.items()}
        state, loss = step(state, sharded)
        losses.append(float(loss))
    if me == 0:
        pathlib.Path(args.out).write_text(json.dumps(
            {"losses": losses, "platform": jax.devices()[0].platform,
             "devices": len(jax.devices()), "processes": count}))
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_job(platform: str, args, out: pathlib.Path, launcher: str, timeout: float) -> dict:
    env = dict(os.environ, JAX_PLATFORMS=platform,
               PJRTKIT_CPU_DEVICES=str(args.devices_per_process),
               XLA_FLAGS=f"--xla_force_host_platform_device_count={args.devices_per_process}")
    if platform == "pjrtkit_tpu":
        env["PJRTKIT_TPU_TOPOLOGY"] = TPU_SLICE
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker",
               "--processes", str(args.processes), "--steps", str(args.steps),
               "--seed", str(args.seed), "--out", str(out)]
    if launcher == "mpiexec":
        env["PJRTKIT_COLLECTIVES"] = "mpi"
        mpiexec = shutil.which("mpiexec", path=str(pathlib.Path(sys.executable).parent)) \
            or shutil.which("mpiexec")
        if mpiexec is None:
            raise RuntimeError("mpiexec not found (pip install 'pjrtkit[mpi]' brings MPICH)")
        procs = [subprocess.Popen([mpiexec, "-n", str(args.processes), *command, "--mpi"],
                                  env=env)]
    else:
        coordinator = f"localhost:{_free_port()}"
        procs = [subprocess.Popen([*command, "--coordinator", coordinator,
                                   "--process-id", str(p)], env=env)
                 for p in range(args.processes)]
    try:
        codes = [p.wait(timeout=timeout) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise RuntimeError(f"the {platform} job did not finish within {timeout:g} s") from None
    if any(codes):
        raise RuntimeError(f"the {platform} job failed (exit codes {codes})")
    return json.loads(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="pjrtkit_cpu")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--launcher", choices=("none", "mpiexec"), default="none",
                        help="how the backend's processes start (mpiexec: MPI is the engine)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mpi", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", default="", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    tpu = args.backend == "pjrtkit_tpu"
    if tpu and args.processes != 2:
        print(f"pjrtkit_tpu: the example's slice {TPU_SLICE} has 2 hosts; use --processes 2")
        return 2
    args.devices_per_process = 4 if tpu else DEVICES_PER_PROCESS
    tolerance = 2e-2 if tpu else 1e-5
    with tempfile.TemporaryDirectory(prefix="pjrtkit-multiprocess-") as tmp:
        try:
            ours = run_job(args.backend, args, pathlib.Path(tmp) / "ours.json", args.launcher,
                           args.timeout)
            theirs = run_job("cpu", args, pathlib.Path(tmp) / "xla.json", "none", args.timeout)
        except RuntimeError as exc:
            print(f"SETUP ERROR: {exc}")
            return 2
    print(f"{args.backend}: {ours['processes']} processes, {ours['devices']} devices "
          f"({'mpiexec, MPI' if args.launcher == 'mpiexec' else 'launcher-free, gloo'}); "
          f"XLA cpu: {theirs['processes']} processes, {theirs['devices']} devices")
    worst = 0.0
    for step, (a, b) in enumerate(zip(ours["losses"], theirs["losses"])):
        relative = abs(a - b) / max(abs(b), 1e-6)
        worst = max(worst, relative)
        print(f"step {step:3d}  {args.backend} {a:.7f}  xla cpu {b:.7f}  rel {relative:.1e}")
    ok = (len(ours["losses"]) == len(theirs["losses"]) == args.steps
          and all(np.isfinite(ours["losses"])) and worst <= tolerance)
    print(f"{'PASS' if ok else 'FAIL'}: worst relative difference {worst:.1e} "
          f"(tolerance {tolerance:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
