"""What a jitted call costs in Python, through real jaxlib: the per-call queries are answered in
C, the execution takes the inline path, and the switches that must see every call (the
profiler) still see them. Fresh interpreters, as JAX fixes its platforms at first use."""
import json

import numpy as np

# Defines abi_counter(): (a Counter, a profile function that counts in it each call of a
# pjrtkit.abi function on the thread it is set on with sys.setprofile).
_COUNT_ABI_ENTRIES = """
    import collections, pathlib, sys
    import pjrtkit.abi.handles
    abi = str(pathlib.Path(pjrtkit.abi.handles.__file__).parent)
    def abi_counter():
        seen = collections.Counter()
        def profile(frame, event, arg):
            if event == "call" and frame.f_code.co_filename.startswith(abi):
                seen[frame.f_code.co_name] += 1
        return seen, profile
"""

# Runs 50 calls of a cheap jitted function and reports the pjrtkit.abi functions entered, plus
# the results.
_PROBE = _COUNT_ABI_ENTRIES + """
    import json
    import numpy as np, jax
    jax.config.update("jax_platforms", "pjrtkit_cpu,cpu")
    dev = jax.devices("pjrtkit_cpu")[0]
    x = jax.device_put(np.arange(3, dtype=np.float32), dev)
    f = jax.jit(lambda a: a * 2 + 1)
    for _ in range(5):
        y = f(x)
    y.block_until_ready()
    seen, profile = abi_counter()
    sys.setprofile(profile)
    for _ in range(50):
        y = f(x)
    y.block_until_ready()
    sys.setprofile(None)
    print(json.dumps({"seen": seen, "y": np.asarray(y).tolist()}))
"""


def _probe(run_python, **env):
    # the Python inline path, not the C execute path (which the elementwise VM would give
    # this program from its second call: tests/jax/test_native_execute.py)
    out = run_python(_PROBE, PJRTKIT_CPU_ELEMENTWISE_VM="0", **env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_jitted_call_enters_python_only_to_execute(run_python):
    result = _probe(run_python)
    assert result["y"] == [1.0, 3.0, 5.0]
    seen = result["seen"]
    # One crossing per call: the inline execute (which also finishes the previous result's
    # queued destroy). Replicas, partitions, outputs, device, memory, memory kind, OnReady and
    # the event and buffer destroys never reach Python.
    assert seen.get("execute_inline_from_c") == 50, seen
    for name in ("executable_num_replicas", "executable_num_partitions", "buffer_device",
                 "buffer_memory", "memory_kind", "event_on_ready", "event_destroy",
                 "buffer_destroy", "loaded_executable_execute"):
        assert name not in seen, (name, seen)
    assert 45 <= seen.get("drain_destroyed", 0) <= 50, seen


def test_with_the_profiler_on_every_call_reaches_python_and_the_result_is_the_same(run_python):
    result = _probe(run_python, PJRTKIT_PROFILE="/dev/null")
    assert result["y"] == [1.0, 3.0, 5.0]
    seen = result["seen"]
    # C answers are off: the profile sees the general callbacks, and the inline path is
    # still taken from Python. (jaxlib 0.12 asks for the replica and partition counts once
    # per executable, not per call; the output count it asks every call in every release.)
    for name in ("executable_num_outputs", "buffer_device", "memory_kind", "event_on_ready",
                 "buffer_destroy", "loaded_executable_execute"):
        assert seen.get(name, 0) >= 50, (name, seen)
    assert "execute_inline_from_c" not in seen
    assert seen.get("_run_inline") == 50, seen


# Where each call ran, with the runtime's clock scaled per program (``executable.perf_counter``
# is the clock ``InlineSpeed`` is fed from): times are decided here, not by the machine's load,
# so what is checked is that measured time, not the cost estimate, picks the path.
# - a 1000-trip loop, priced above INLINE_WORK_LIMIT, measured instant (scale 0): inline;
# - a chain of three 768x768 matmuls, priced high, measured slow (scale 1e6): the worker;
# - a cheap a*2+1, priced low, measured slow: the worker once three runs in a row were slow.
# Counts are of the pjrtkit.abi functions entered per call, after three warm-up calls.
_TIMED_PROBE = _COUNT_ABI_ENTRIES + """
    import json, time
    import numpy as np, jax
    from jax import lax
    from pjrtkit.runtime import executable
    from pjrtkit_cpu.fusion import cache
    jax.config.update("jax_platforms", "pjrtkit_cpu,cpu")
    scale = [1.0]
    executable.perf_counter = lambda: time.perf_counter() * scale[0]
    dev = jax.devices("pjrtkit_cpu")[0]
    loop = jax.jit(lambda v: lax.fori_loop(0, 1000, lambda i, c: c * 0.999 + 1e-3, v))
    chain = jax.jit(lambda m: (m @ m @ m @ m).sum())
    cheap = jax.jit(lambda v: v * 2 + 1)
    x = jax.device_put(np.linspace(-1, 1, 128, dtype=np.float32), dev)
    m = jax.device_put(np.full((768, 768), 1e-3, np.float32), dev)
    jax.block_until_ready((loop(x), chain(m)))
    cache.wait_all(timeout=300)
    out = {}
    for name, f, a, factor in (("loop", loop, x, 0.0), ("chain", chain, m, 1e6),
                               ("cheap", cheap, x, 1e6)):
        scale[0] = factor
        for _ in range(3):
            jax.block_until_ready(f(a))
        # A warm-up served by the worker completes its outputs before the worker counts
        # itself idle, and the inline path declines while it is busy: let it get there (real
        # time; the scaled clock is the runtime's), so the counted calls see the settled path.
        time.sleep(0.2)
        out[name], profile = abi_counter()
        sys.setprofile(profile)
        for _ in range(20):
            y = f(a)
        y.block_until_ready()
        sys.setprofile(None)
    out["loop_y"] = np.asarray(loop(x)).tolist()[:2]
    on_xla = jax.device_put(np.asarray(x), jax.devices("cpu")[0])
    out["loop_xla"] = np.asarray(loop(on_xla)).tolist()[:2]
    print(json.dumps(out))
"""

def test_what_runs_inline_follows_measured_time_not_the_estimate(run_python):
    out = run_python(_TIMED_PROBE, PJRTKIT_CPU_ELEMENTWISE_VM="0")  # (see _probe)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # Measured instant: every call inline, although the estimate says otherwise.
    loop = result["loop"]
    assert loop.get("execute_inline_from_c") == 20, loop
    assert "loaded_executable_execute" not in loop, loop
    # Measured slow: every call declined by the inline path and queued on the worker by the
    # general one, whether the estimate said slow (chain) or fast (cheap).
    for name in ("chain", "cheap"):
        assert result[name].get("loaded_executable_execute") == 20, (name, result[name])
    # (XLA's CPU backend contracts c * 0.999 + 1e-3 into an FMA, as the native loop does.)
    np.testing.assert_allclose(result["loop_y"], result["loop_xla"], rtol=1e-6)
