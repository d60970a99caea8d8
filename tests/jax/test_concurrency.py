"""Concurrent use of one pjrtkit_cpu client (issue 13): threads compiling distinct programs,
executing, transferring and deleting at once, and OnReady callbacks racing Destroy at the C
ABI, all in bounded time (a deadlock is a timeout, not a hung suite) with every result checked.
Each scenario runs in a fresh interpreter; ``PJRTKIT_CONCURRENCY_ROUNDS`` repeats them."""
from __future__ import annotations

import os

import pytest

ROUNDS = int(os.environ.get("PJRTKIT_CONCURRENCY_ROUNDS", "1"))
TIME_LIMIT_S = 240

THREADS = """
import threading, sys, time
import numpy as np
import jax, jax.numpy as jnp
jax.config.update("jax_platforms", "pjrtkit_cpu,cpu")
d = jax.devices("pjrtkit_cpu")[0]
errors = []
N, CALLS = 8, 40

def worker(t):
    rng = np.random.default_rng(t)
    try:
        for i in range(CALLS):
            k = float(t * 1000 + i % 5)              # distinct programs: k is baked in
            f = jax.jit(lambda a, k=k: jnp.tanh(a) * k + a.sum())
            host = rng.standard_normal((8, 8)).astype(np.float32)
            x = jax.device_put(host, d)                # transfer
            y = f(x)                                   # compile (first time) and execute
            z = (y + 1).block_until_ready()           # execute on a pending input
            want = np.tanh(host) * np.float32(k) + host.sum()
            np.testing.assert_allclose(np.asarray(y), want, rtol=2e-5, atol=2e-3)
            np.testing.assert_allclose(np.asarray(z), want + 1, rtol=2e-5, atol=2e-3)
            if i % 3 == 0:
                x.delete()                             # delete while others run
                try:
                    f(x)
                    errors.append("deleted array was usable")
                except Exception:
                    pass
            del y, z
    except Exception as exc:
        errors.append(f"thread {t}: {type(exc).__name__}: {exc}")

threads = [threading.Thread(target=worker, args=(t,)) for t in range(N)]
began = time.monotonic()
for t in threads: t.start()
for t in threads: t.join(timeout=200)
alive = [t for t in threads if t.is_alive()]
print("alive", len(alive), "errors", len(errors), "seconds", round(time.monotonic() - began, 1))
for e in errors[:5]: print(e)
if alive:  # a deadlock or a starved machine: the stacks tell which
    import faulthandler; faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
sys.stdout.flush()
import os; os._exit(0 if not alive and not errors else 1)
"""

ON_READY_RACES_DESTROY = """
import threading, os
import numpy as np
from pjrtkit.abi._cffi import ffi
from pjrtkit.discovery import load_backend
from pjrtkit.conformance.abi_driver import AbiDriver
d = AbiDriver.from_backend(load_backend("cpu"))
d.initialize()
loaded = d.compile(lambda x: (x @ x.T).sum() + x, np.zeros((64, 64), np.float32))
x = d.put(np.ones((64, 64), np.float32))
fired = []
lock = threading.Lock()

@ffi.callback("void(PJRT_Error*, void*)")
def on_ready(error, user_arg):
    with lock:
        fired.append(error == ffi.NULL)

def race(rounds):
    for _ in range(rounds):
        args = d.execute_args(loaded, [[x]], 1)
        d.invoke("PJRT_LoadedExecutable_Execute", args)
        event, out = args.device_complete_events[0], args.output_lists[0][0]
        done = threading.Event()

        def destroy():
            done.wait()
            d.call("PJRT_Event_Destroy", event=event)   # racing the callback registration

        t = threading.Thread(target=destroy)
        t.start()
        d.call("PJRT_Event_OnReady", event=event, callback=on_ready, user_arg=ffi.NULL)
        done.set()
        t.join(timeout=60)
        d.call("PJRT_Buffer_Destroy", buffer=out)

threads = [threading.Thread(target=race, args=(50,)) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join(timeout=120)
alive = sum(t.is_alive() for t in threads)
print("alive", alive, "fired", len(fired), "ok", all(fired))
os._exit(0 if alive == 0 else 1)
"""


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_threads_compile_execute_transfer_and_delete_at_once(run_python, round_):
    result = run_python(THREADS, PJRTKIT_CPU_FUSION="0")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.startswith("alive 0 errors 0"), result.stdout


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_on_ready_callbacks_race_event_destroy(run_python, round_):
    result = run_python(ON_READY_RACES_DESTROY, JAX_PLATFORMS="cpu")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.strip() == "alive 0 fired 200 ok True", result.stdout
