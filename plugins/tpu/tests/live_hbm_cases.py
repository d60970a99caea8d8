"""HBM on the live virtual v5e-8 (``python live_hbm_cases.py`` prints JSON): memory_stats(),
programs that cannot fit in 15.75 GiB, refused at compile time before anything runs, and (run
with ``PJRTKIT_TPU_MEMORY_LIMIT=64M``) transfers past the limit; the process lives and the next
call works."""
from __future__ import annotations

import json
import os


def report() -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_platforms", "pjrtkit_tpu,cpu")
    devices = jax.devices("pjrtkit_tpu")
    device = devices[0]
    out = {"kinds": sorted({d.device_kind for d in devices}), "count": len(devices)}
    x = jax.device_put(np.ones((1024, 1024), np.float32), device)
    out["after_4mib"] = device.memory_stats()

    def attempt(fn):
        try:
            fn()
            return "ok"
        except Exception as exc:  # noqa: BLE001 - the message is the measurement
            return str(exc)

    out["too_big_zeros"] = attempt(
        lambda: jnp.zeros((17 << 28,), jnp.float32, device=device).block_until_ready())
    ran = []

    def big(a):
        jax.debug.callback(lambda: ran.append(1))  # never reached: refused at compile
        return jnp.concatenate([a] * 5000)

    out["too_big_program"] = attempt(lambda: jax.jit(big)(x).block_until_ready())
    out["ran"] = len(ran)
    out["next_call"] = float(jax.jit(lambda a: (a * 2).sum())(x))
    if os.environ.get("PJRTKIT_TPU_MEMORY_LIMIT"):
        keep = jax.device_put(np.ones(12 << 20, np.float32), device)  # 48 MiB of 64
        out["past_limit_transfer"] = attempt(
            lambda: jax.device_put(np.ones(8 << 20, np.float32), device).block_until_ready())
        out["past_limit_program"] = attempt(
            lambda: jax.jit(lambda a: jnp.concatenate([a, a]))(keep).block_until_ready())
        del keep
    out["after"] = device.memory_stats()
    return out


if __name__ == "__main__":
    print("REPORT " + json.dumps(report()))
