"""The C execute path (ARCHITECTURE.md, "The C execute path") through JAX on pjrtkit_cpu: a jitted
program that is one compiled kernel is answered in C without entering Python, runs its kernel
on every call, keeps memory statistics, limits and live-handle counts, and falls back to the
Python path whenever C cannot vouch for a call.

Each scenario runs in a fresh interpreter (``run_python``) with PJRTKIT_CHECK_KERNELS off (the
cpu plugin's tests turn it on for the whole session, and it wraps kernels, so no program would
be one kernel) and its own kernel cache directory. Results are compared with XLA's CPU backend
in the same process.
"""
from __future__ import annotations

import json
import textwrap

import pytest

# The helpers every scenario starts with: a warmed-up program whose native plan is installed.
PRELUDE = """
import json, sys, threading, time
import numpy as np, jax, jax.numpy as jnp
from pjrtkit.abi import handles, native
from pjrtkit.abi._cffi import ffi
from pjrtkit_cpu.fusion import cache

dev, cpu = jax.devices("pjrtkit_cpu")[0], jax.devices("cpu")[0]

def loaded_refs():
    return [ffi.from_handle(ffi.cast("pjrtkit_head*", p).ref)
            for p in list(handles.LOADED_EXECUTABLES._live)]

def native_executions():
    return sum(r.native.executions() for r in loaded_refs() if r.native is not None)

def warm(f, *args):
    for _ in range(4):
        jax.block_until_ready(f(*args))
    cache.wait_all(300)
    for _ in range(2):  # installs the plan, then makes the arguments readable
        jax.block_until_ready(f(*args))
    assert any(r.native.plan is not None for r in loaded_refs()), "no native plan installed"

def same(ours, theirs):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    return ours.dtype == theirs.dtype and np.array_equal(ours, theirs)
"""


@pytest.fixture
def scenario(run_python, tmp_path):
    def run(code: str, **env) -> dict:
        out = run_python(PRELUDE + textwrap.dedent(code), JAX_PLATFORMS="pjrtkit_cpu,cpu",
                         PJRTKIT_CHECK_KERNELS="0", PJRTKIT_CACHE_DIR=str(tmp_path), **env)
        assert out.returncode == 0, out.stderr[-4000:]
        assert "Traceback" not in out.stderr, out.stderr[-4000:]
        return json.loads(out.stdout.strip().splitlines()[-1])
    return run


def test_cached_calls_enter_no_python_on_any_thread(scenario):
    result = scenario("""
        f = jax.jit(lambda x: x * 2 + 1)
        x = jax.device_put(np.arange(3, dtype=np.float32), dev)
        warm(f, x)
        calls = []
        def profile(frame, event, arg):
            if event == "call":
                calls.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
        before = native_executions()
        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            for _ in range(200):
                y = f(x)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        served = native_executions() - before
        print(json.dumps({"calls": calls[:20], "served": served,
                          "same": same(y, f(jax.device_put(np.arange(3, dtype=np.float32), cpu)))}))
    """)
    assert result["calls"] == [], result
    assert result["served"] == 200, result
    assert result["same"], result


def test_the_kernel_runs_on_every_call_with_fresh_inputs(scenario):
    # Every call gets new contents (outputs of the previous call, and arrays made meanwhile):
    # a cached result could not give XLA's answer, and C counts each kernel run.
    result = scenario("""
        f = jax.jit(lambda x, y: x * y + jnp.float32(0.5))
        x = jax.device_put(np.linspace(-1, 1, 7, dtype=np.float32), dev)
        warm(f, x, x)
        before = native_executions()
        rng = np.random.default_rng(0)
        ok = True
        n = 50
        for i in range(n):
            a = rng.standard_normal(7).astype(np.float32)
            b = rng.standard_normal(7).astype(np.float32)
            da, db = jax.device_put(a, dev), jax.device_put(b, dev)
            f(da, db)  # the first call with new buffers makes them readable by C
            ours = f(da, db)
            theirs = f(jax.device_put(a, cpu), jax.device_put(b, cpu))
            ok = ok and same(ours, theirs)
            chained = f(ours, ours)  # an output of the C path as an argument
            ok = ok and same(chained, f(theirs, theirs))
        print(json.dumps({"ok": ok, "served": native_executions() - before, "n": n}))
    """)
    assert result["ok"], result
    # At least the second call with each new pair and the chained call run in C.
    assert result["served"] >= 2 * result["n"], result


def test_memory_statistics_and_live_handles_count_the_c_path_s_buffers(scenario):
    result = scenario("""
        import gc
        f = jax.jit(lambda x: x * 3 - 1)
        x = jax.device_put(np.ones(1000, np.float32), dev)
        warm(f, x)
        gc.collect()
        base_bytes = dev.memory_stats()["bytes_in_use"]
        base_handles = len(handles.BUFFERS)
        before = native_executions()
        kept = [f(x) for _ in range(10)]
        served = native_executions() - before
        grown = dev.memory_stats()["bytes_in_use"] - base_bytes
        handles_grown = len(handles.BUFFERS) - base_handles
        values = [float(np.asarray(k)[0]) for k in kept]  # Python adopts each output here
        del kept
        gc.collect()
        print(json.dumps({"served": served, "grown": grown, "handles": handles_grown,
                          "values": values,
                          "after": dev.memory_stats()["bytes_in_use"] - base_bytes,
                          "handles_after": len(handles.BUFFERS) - base_handles,
                          "readable": native.readable_storages()}))
    """)
    assert result["served"] == 10, result
    assert result["grown"] == 10 * 4000 and result["handles"] == 10, result
    assert result["values"] == [2.0] * 10, result
    assert result["after"] == 0 and result["handles_after"] == 0, result
    assert result["readable"] <= 1, result  # only x, still alive


def test_a_memory_limit_refuses_in_c_and_python_reports_it(scenario):
    result = scenario("""
        f = jax.jit(lambda x: x + 1)
        x = jax.device_put(np.zeros(256 * 1024, np.float32), dev)  # 1 MiB
        warm(f, x)
        kept = []
        error = None
        try:
            for _ in range(8):
                kept.append(f(x))
                kept[-1].block_until_ready()
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        print(json.dumps({"made": len(kept), "error": error,
                          "in_use": dev.memory_stats()["bytes_in_use"]}))
    """, PJRTKIT_CPU_MEMORY_LIMIT="4M")
    # x (1 MiB) and two warm-up results may still be alive; at most 4 MiB are ever in use.
    assert result["error"] is not None and "RESOURCE_EXHAUSTED" in result["error"], result
    assert "would exceed the memory's limit" in result["error"], result
    assert result["in_use"] <= 4 << 20, result


def test_the_c_path_declines_what_it_cannot_vouch_for(scenario):
    # Donated, deleted, on another device, not ready: each call is served by Python with
    # Python's answer (an error, or the result), and C serves the calls that follow.
    result = scenario("""
        f = jax.jit(lambda x: x * 2 + 1)
        g = jax.jit(lambda x: x * 2 + 1, donate_argnums=0)
        x = jax.device_put(np.arange(4, dtype=np.float32), dev)
        warm(f, x)
        report = {}
        # deleted
        gone = jax.device_put(np.arange(4, dtype=np.float32), dev)
        f(gone).block_until_ready(); f(gone).block_until_ready()
        gone.delete()
        before = native_executions()
        try:
            f(gone)
            report["deleted"] = "no error"
        except Exception as exc:
            report["deleted"] = type(exc).__name__ + ": " + str(exc)[:300]
        # donated to another program
        d = jax.device_put(np.arange(4, dtype=np.float32), dev)
        f(d).block_until_ready(); f(d).block_until_ready()
        g(d).block_until_ready()
        before = native_executions()
        try:
            f(d)
            report["donated"] = "no error"
        except Exception as exc:
            report["donated"] = type(exc).__name__ + ": " + str(exc)[:300]
        report["refused_in_c"] = native_executions() - before
        # on another device of the same client: JAX moves it (or the general path runs it)
        other = jax.device_put(np.arange(4, dtype=np.float32), jax.devices("pjrtkit_cpu")[1])
        report["other_device"] = same(f(other), f(jax.device_put(np.arange(4, dtype=np.float32), cpu)))
        # not ready: the output of a slow program still running on the worker
        slow = jax.jit(lambda m: (m @ m @ m @ m)[0, :4])
        m = jax.device_put(np.eye(600, dtype=np.float32), dev)
        for _ in range(4): slow(m).block_until_ready()
        before = native_executions()
        pending = slow(m)
        y = f(pending)
        report["pending_ok"] = same(y, f(slow(jax.device_put(np.eye(600, dtype=np.float32), cpu))))
        report["served_after"] = native_executions() - before
        print(json.dumps(report))
    """, PJRTKIT_CPU_DEVICES="2")
    assert "deleted" in result["deleted"].lower() or "donated" in result["deleted"].lower(), \
        result
    assert "deleted" in result["donated"].lower() or "donated" in result["donated"].lower(), \
        result
    assert result["refused_in_c"] == 0, result
    assert result["other_device"], result
    assert result["pending_ok"], result


def test_an_error_from_the_kernel_makes_python_run_the_program(scenario):
    # A kernel that fails (returns non-zero): C discards its outputs and the ordinary path
    # runs the program, so the answer is the plan's, never the failed kernel's.
    result = scenario("""
        import ctypes
        from pjrtkit.types import NativeKernel
        from pjrtkit_cpu.fusion.whole import dense_address
        runs = []
        FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        failing = FN(lambda a, o, c: runs.append(1) or 7)
        x = jax.device_put(np.arange(5, dtype=np.float32), dev)
        # the failing kernel replaces the one the plugin hands over (the elementwise VM's,
        # at once) before the first execution asks for it
        f = jax.jit(lambda x: x - 3).lower(x).compile()
        for r in loaded_refs():
            whole = r.obj.executable.compiled.executable.whole
            whole._native = NativeKernel(ctypes.cast(failing, ctypes.c_void_p).value,
                                         dense_address, keepalive=failing)
        for _ in range(2): f(x).block_until_ready()
        runs.clear()
        ys = [np.asarray(f(x)) for _ in range(5)]
        ok = all(same(y, np.arange(5, dtype=np.float32) - 3) for y in ys)
        print(json.dumps({"ok": ok, "runs": len(runs), "served": native_executions()}))
    """)
    assert result["ok"] and result["runs"] == 5 and result["served"] == 0, result


def test_host_transfers_are_made_in_c_once_a_plan_opened_the_memory(scenario):
    # After a native plan's outputs opened the device's memory, PJRT_Client_BufferFromHostBuffer
    # is answered in C for dense arrays of whole-byte types: the buffer's contents, memory
    # statistics and live handles are the same as Python's; non-dense data, a layout or a limit
    # go to Python.
    result = scenario("""
        import gc, ml_dtypes
        from pjrtkit.abi._cffi import lib
        f = jax.jit(lambda x: x * 2 + 1)
        warm(f, jax.device_put(np.arange(3, dtype=np.float32), dev))
        gc.collect()
        rng = np.random.default_rng(1)
        arrays = [np.float32(0.999), rng.standard_normal((2, 3)).astype(np.float32),
                  rng.integers(-9, 9, 5).astype(np.int8), rng.random(4) < 0.5,
                  rng.standard_normal(3).astype(ml_dtypes.bfloat16),
                  (rng.standard_normal(2) + 1j).astype(np.complex64),
                  rng.integers(0, 9, (2, 2, 2)).astype(np.uint16), np.zeros((0, 3), np.float32)]
        report = {"same": [], "made_in_c": [], "grown": []}
        kept = []
        for a in arrays:
            live, used = lib.pjrtkit_native_buffers_live(), dev.memory_stats()["bytes_in_use"]
            y = jax.device_put(a, dev)
            kept.append(y)
            report["made_in_c"].append(lib.pjrtkit_native_buffers_live() - live)
            report["grown"].append(dev.memory_stats()["bytes_in_use"] - used - a.nbytes)
            ours = np.asarray(y)
            report["same"].append(ours.dtype == a.dtype and ours.shape == np.shape(a)
                                  and ours.tobytes() == np.asarray(a).tobytes())
        # column-major data: jaxlib passes its strides; C declines and Python copies it
        t = np.asfortranarray(rng.standard_normal((3, 4)).astype(np.float32))
        report["fortran"] = same(jax.device_put(t, dev), t)
        # a transferred scalar feeds the C path like any readable buffer
        g = jax.jit(lambda x, s: x * s)
        xs = jax.device_put(np.linspace(-1, 1, 5, dtype=np.float32), dev)
        warm(g, xs, jax.device_put(np.float32(3), dev))
        before = native_executions()
        outs = [g(xs, jax.device_put(np.float32(k), dev)) for k in range(5)]
        report["served"] = native_executions() - before
        report["values"] = all(same(o, np.linspace(-1, 1, 5, dtype=np.float32) * np.float32(k))
                               for k, o in enumerate(outs))
        print(json.dumps(report))
    """)
    assert all(result["same"]), result
    assert result["made_in_c"] == [1] * 8, result
    assert result["grown"] == [0] * 8, result
    assert result["fortran"], result
    assert result["served"] == 5 and result["values"], result


def test_a_host_transfer_past_the_memory_limit_is_refused_by_python(scenario):
    result = scenario("""
        f = jax.jit(lambda x: x + 1)
        x = jax.device_put(np.zeros(16, np.float32), dev)
        warm(f, x)
        error = None
        try:
            jax.device_put(np.zeros(2 * 1024 * 1024, np.float32), dev)  # 8 MiB
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        small = jax.device_put(np.ones(4, np.float32), dev)
        print(json.dumps({"error": error, "small": same(small, np.ones(4, np.float32)),
                          "in_use": dev.memory_stats()["bytes_in_use"]}))
    """, PJRTKIT_CPU_MEMORY_LIMIT="4M")
    assert result["error"] is not None and "RESOURCE_EXHAUSTED" in result["error"], result
    assert result["small"] and result["in_use"] <= 4 << 20, result


def test_an_eager_loop_runs_in_c_and_matches_xla(scenario):
    # Un-jitted jnp ops with Python scalars, as a notebook writes them: each op is a small
    # cached program, each scalar a host transfer. Once the plans are in, every op is served in
    # C (its inputs: C's outputs and C's transfers) and no pjrtkit Python runs on any thread;
    # JAX's own Python does.
    result = scenario("""
        def loop(x, n):
            for _ in range(n):
                x = x * 0.999; x = x + 0.001; x = jnp.tanh(x); x = jnp.maximum(x, -0.5)
            return x
        x0 = np.linspace(-1, 1, 1000, dtype=np.float32)
        x = jax.device_put(x0, dev)
        for _ in range(4): loop(x, 2).block_until_ready()
        cache.wait_all(300)
        loop(x, 2).block_until_ready()
        calls = set()
        def profile(frame, event, arg):
            if event == "call":
                name = frame.f_code.co_filename
                if "pjrtkit" in name:
                    calls.add(f"{name}:{frame.f_code.co_name}")
        before = native_executions()
        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            ours = loop(x, 25)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        served = native_executions() - before
        theirs = loop(jax.device_put(x0, cpu), 25)
        ours, theirs = np.asarray(ours), np.asarray(theirs)
        # (tanh differs from XLA's by a few ulp; the loop contracts towards 0, so compare
        # absolutely there)
        print(json.dumps({"calls": sorted(calls)[:20], "served": served,
                          "close": bool(np.allclose(ours, theirs, rtol=1e-5, atol=1e-6)),
                          "max_abs": float(np.max(np.abs(ours - theirs)))}))
    """)
    assert result["calls"] == [], result
    assert result["served"] == 100, result
    assert result["close"], result


def test_waiting_for_and_reading_results_enter_no_python(scenario):
    # What a loop does with each result: block_until_ready (PJRT_Buffer_ReadyEvent, the NULL
    # error of the completed event's PJRT_Error_Destroy) and np.asarray (the shape queries and
    # PJRT_Buffer_ToHostBuffer), on C's outputs and on a Python buffer C may read. Each must be
    # answered in C with the Python answers' values (C answers off: handles.set_c_answers).
    result = scenario("""
        f = jax.jit(lambda x: x * 2 + 1)
        host = np.arange(12, dtype=np.float32).reshape(3, 4)
        x = jax.device_put(host, dev)
        warm(f, x)
        calls = set()
        def profile(frame, event, arg):
            if event == "call" and "pjrtkit" in frame.f_code.co_filename:
                calls.add(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
        outputs, read = [], []
        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            for _ in range(50):
                y = f(x)
                y.block_until_ready()
                read.append(np.asarray(y))
                read.append(np.asarray(x))   # a Python buffer, readable by C since warm()
                z = f(y)                     # C's output as an argument, then read
                read.append(np.asarray(z))
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        expected = [host * 2 + 1, host, (host * 2 + 1) * 2 + 1] * 50
        old = handles.set_c_answers(False)
        try:
            from_python = [np.asarray(f(x)), np.asarray(x), np.asarray(f(f(x)))]
            dims = list(f(x).shape), f(x).dtype.name
        finally:
            handles.set_c_answers(old)
        print(json.dumps({
            "calls": sorted(calls)[:20],
            "same": all(same(a, b) for a, b in zip(read, expected)) and len(read) == 150,
            "python_same": all(same(a, b) for a, b in zip(from_python, expected[:3])),
            "dims": dims}))
    """)
    assert result["calls"] == [], result
    assert result["same"] and result["python_same"], result
    assert result["dims"] == [[3, 4], "float32"], result


def test_small_elementwise_programs_run_in_c_from_their_second_call_with_nothing_compiled(
        scenario):
    # The elementwise VM (pjrtkit.elementwise_vm): the kernel is handed over at the first
    # execution, so the second call of each program is served in C, and no Numba loop is
    # compiled for them. Each program's C answer is XLA's, bit for bit (float
    # transcendentals within the dtype's tolerance), on the edge values of its dtype.
    result = scenario("""
        from pjrtkit.testing.tolerances import tolerance
        nan, inf = float("nan"), float("inf")
        f32 = np.array([0.0, -0.0, 1.5, -2.5, nan, inf, -inf, 3e38, 1e-40, 7.0], np.float32)
        f64 = f32.astype(np.float64) * 1.25
        i8 = np.array([-128, -1, 0, 1, 127, 5, -7, 64, 3, -3], np.int8)
        u32 = np.array([0, 1, 2**31, 2**32 - 1, 7, 31, 32, 33, 5, 9], np.uint32)
        i64 = np.array([-2**63, -1, 0, 1, 2**63 - 1, 3, -3, 10, -10, 7], np.int64)
        b = np.array([True, False] * 5)
        programs = {
            "f32 chain": (lambda x: jnp.maximum(x * 0.5 + 1, -x) - jnp.minimum(x, 0.0), f32),
            "f32 tanh exp": (lambda x: jnp.tanh(x) + jnp.exp(x * 0.01), f32),
            "f32 to i32": (lambda x: x.astype(jnp.int32), f32),
            "f64 divide sqrt": (lambda x: jnp.sqrt(jnp.abs(x)) / (x - 1.25), f64),
            "i8 wrap": (lambda x: x * 3 + 100 - (-x), i8),
            # (lax, not jnp.where or //: those are calls, which the plan keeps apart)
            "i8 divide": (lambda x: jax.lax.div(x, jnp.int8(-1)) + jax.lax.rem(x, jnp.int8(3)),
                          i8),
            "u32 shifts": (lambda x: (x << 3) ^ (x >> 1) | jax.lax.shift_right_logical(x, x), u32),
            "i64 compare select": (lambda x: jax.lax.select(x > 0, x, -x), i64),
            "bool logic": (lambda x: ~x & (x | ~x), b),
            "f32 compare to f64": (lambda x: jax.lax.select(x >= 1, x, x * 0).astype(jnp.float64),
                                   f32),
        }
        report = {"served": {}, "same": {}}
        with jax.enable_x64(True):
            for name, (fn, a) in programs.items():
                f = jax.jit(fn)
                x = jax.device_put(a, dev)
                f(x).block_until_ready()  # the first execution: Python, which installs the plan
                before = native_executions()
                ours = np.asarray(f(x))
                report["served"][name] = native_executions() - before
                theirs = np.asarray(f(jax.device_put(a, cpu)))
                if ours.dtype.kind == "f" and "tanh" in name:
                    rtol, atol = tolerance(ours.dtype)
                    ok = np.allclose(ours, theirs, rtol=rtol, atol=atol, equal_nan=True)
                else:
                    ok = ours.dtype == theirs.dtype and ours.tobytes() == theirs.tobytes()
                report["same"][name] = bool(ok)
        report["compiles"] = cache.cache_sizes()["fused_compiles_started"]
        print(json.dumps(report))
    """)
    assert all(result["same"].values()), result["same"]
    assert all(n == 1 for n in result["served"].values()), json.dumps(result["served"])
    assert result["compiles"] == 0, result


def test_a_large_group_runs_on_the_vm_until_its_numba_loop_replaces_it(scenario):
    # A group of fusion size is compiled at once; meanwhile the C path runs it on the VM
    # (through the cell), and the compiled loop takes the cell over when it lands; both
    # compute the same bits (float32 transcendentals are one expression for every renderer).
    result = scenario("""
        from pjrtkit import elementwise_vm
        from pjrtkit.testing.tolerances import tolerance
        f = jax.jit(lambda x: jnp.tanh(x) * 2 + 1)
        a = np.linspace(-3, 3, 1 << 15, dtype=np.float32)
        x = jax.device_put(a, dev)
        f(x).block_until_ready()
        cells = [r.obj.executable.compiled.executable.whole._cell for r in loaded_refs()]
        first = cells[0].current_address
        vm = np.asarray(f(x))
        cache.wait_all(300)
        f(x).block_until_ready()
        before = native_executions()
        numba = np.asarray(f(x))
        served = native_executions() - before
        theirs = np.asarray(f(jax.device_put(a, cpu)))
        rtol, atol = tolerance(np.dtype(np.float32))
        print(json.dumps({"first_is_vm": first == elementwise_vm.ADDRESS,
                          "replaced": cells[0].current_address != elementwise_vm.ADDRESS,
                          "served": served, "same_bits": vm.tobytes() == numba.tobytes(),
                          "vm_ok": bool(np.allclose(vm, theirs, rtol=rtol, atol=atol)),
                          "numba_ok": bool(np.allclose(numba, theirs, rtol=rtol, atol=atol))}))
    """)
    assert result == {"first_is_vm": True, "replaced": True, "served": 1, "same_bits": True,
                      "vm_ok": True, "numba_ok": True}, result
