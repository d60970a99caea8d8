"""One process of a job in which the last process dies (SIGKILL) while the others are inside a
collective: each survivor records the error its collective returned and how long after the
death it came, then exits as the error makes it (jaxlib's shutdown may then abort it)."""
from __future__ import annotations

import argparse
import os
import pathlib
import signal
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import jax
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    # Heartbeats far beyond the test: the error must come from the engine, not from jaxlib.
    jax.distributed.initialize(args.coordinator, num_processes=args.num_processes,
                               process_id=args.process_id, heartbeat_timeout_seconds=300,
                               shutdown_timeout_seconds=10, initialization_timeout=120)
    out = pathlib.Path(args.out)
    mesh = Mesh(np.array(jax.devices()), ("i",))
    sharding = NamedSharding(mesh, P("i"))
    x = jax.make_array_from_process_local_data(sharding, np.ones((1, 1024), np.float32))
    step = jax.jit(jax.shard_map(lambda v: lax.psum(v, "i") / 2, mesh=mesh, in_specs=P("i"),
                                 out_specs=P("i")))
    x = jax.block_until_ready(step(x))  # every process got here: the engine is connected
    victim = args.num_processes - 1
    dead_at = out / "killed_at"
    if args.process_id == victim:
        time.sleep(2)  # the others are waiting in the next collective by now
        dead_at.write_text(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        jax.block_until_ready(step(x))
        (out / f"result.p{args.process_id}").write_text("no error")
    except Exception as exc:  # noqa: BLE001 - what the user sees is the measurement
        (out / f"result.p{args.process_id}").write_text(
            f"{time.time()}\n{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
