"""Numba compiles in a child process (``pjrtkit_cpu.fusion.compile_process``): the parent loads
the child's code from Numba's cache, a compile error is reported like an in-process one, and a
child that dies while compiling fails that kernel only. Each case runs in a fresh interpreter:
the child belongs to the process that started it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import json, os, signal, sys
import numpy as np
from pjrtkit_cpu.fusion import cache, compile_process

F64 = np.dtype(np.float64)

def child():
    pids = compile_process.child_pids()
    assert len(pids) <= 1, pids
    return pids[0] if pids else None

def source(body, name="kernel"):
    return ("import numpy as np\\nfrom numba import njit\\n\\n\\n"
            "@njit(cache=True, nogil=True)\\n"
            f"def {name}(x, out):\\n" + "".join(f"    {line}\\n" for line in body))

def run(body):
    future = cache.compile_async(source(body), [(F64, 1, True), (F64, 1, False)])
    try:
        kernel = future.result(timeout=300)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    x = np.arange(4.0)
    out = np.zeros(4)
    kernel(x, out)
    return {"out": out.tolist(), "hits": sum(kernel.stats.cache_hits.values()),
            "misses": sum(kernel.stats.cache_misses.values())}
"""


def _run(script: str, tmp_path, **env) -> dict:
    code = PRELUDE + textwrap.dedent(script)
    env = {**os.environ, "PJRTKIT_CACHE_DIR": str(tmp_path),
           "PJRTKIT_CPU_COMPILE_PROCESSES": "1", **env}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_kernel_compiled_in_the_child_is_loaded_from_numbas_cache(tmp_path):
    found = _run("""
        result = run(["for i in range(x.shape[0]):", "    out[i] = x[i] * 2.0 + 1.0"])
        result["child"] = child()
        result["parent"] = os.getpid()
        print(json.dumps(result))
    """, tmp_path)
    assert found["out"] == [1.0, 3.0, 5.0, 7.0]
    assert found["child"] not in (None, found["parent"])
    # this process compiled nothing: its one overload came from the child's cache entry
    assert (found["hits"], found["misses"]) == (1, 0)


def test_a_kernel_numba_cannot_type_fails_with_numbas_error(tmp_path):
    found = _run("""
        print(json.dumps(run(["out[0] = x[0] + 'a'"])))
    """, tmp_path)
    assert found["error"].startswith("KernelCompileError: TypingError"), found


@pytest.mark.skipif(not hasattr(os, "kill") or sys.platform == "win32", reason="POSIX signals")
def test_a_child_that_dies_while_compiling_fails_that_kernel_and_the_next_gets_a_new_child(
        tmp_path):
    # The kernel's module kills the process that imports it: the child, never this process
    # (it imports a kernel's module only after the child compiled it).
    found = _run("""
        first = child()
        killed = cache.compile_async(
            "import os, signal\\nos.kill(os.getpid(), signal.SIGKILL)\\n"
            + source(["out[0] = x[0]"]), [(F64, 1, True), (F64, 1, False)])
        try:
            killed.result(timeout=300)
            error = None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        after = run(["for i in range(x.shape[0]):", "    out[i] = x[i] - 1.0"])
        print(json.dumps({"error": error, "after": after, "child": child()}))
    """, tmp_path)
    assert "the compile process ended (signal SIGKILL)" in found["error"], found
    assert found["after"]["out"] == [-1.0, 0.0, 1.0, 2.0]
    assert found["after"]["hits"] == 1 and found["child"] is not None


def test_with_the_child_turned_off_the_compile_runs_in_this_process(tmp_path):
    found = _run("""
        result = run(["for i in range(x.shape[0]):", "    out[i] = x[i] * 3.0"])
        result["child"] = child()
        print(json.dumps(result))
    """, tmp_path, PJRTKIT_CPU_COMPILE_PROCESS="0")
    assert found["out"] == [0.0, 3.0, 6.0, 9.0]
    assert found["child"] is None and found["misses"] == 1


def test_an_idle_child_ends_and_the_next_compile_starts_another(tmp_path):
    found = _run("""
        import time
        compile_process.IDLE_EXIT_S = 0.5
        first = run(["for i in range(x.shape[0]):", "    out[i] = x[i] + 2.0"])
        pid = child()
        deadline = time.monotonic() + 60
        while child() is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        gone = child() is None and not os.path.exists(f"/proc/{pid}")
        second = run(["for i in range(x.shape[0]):", "    out[i] = x[i] + 4.0"])
        print(json.dumps({"first": first, "gone": gone, "pid": pid,
                          "second": second, "again": child()}))
    """, tmp_path)
    assert found["first"]["out"] == [2.0, 3.0, 4.0, 5.0] and found["gone"], found
    assert found["second"]["out"] == [4.0, 5.0, 6.0, 7.0] and found["second"]["hits"] == 1
    assert found["again"] not in (None, found["pid"])


def test_with_two_children_kernels_compile_side_by_side_and_all_load_from_the_cache(tmp_path):
    found = _run("""
        futures = [cache.compile_async(source([f"out[0] = x[0] * {k}.0"]),
                                       [(F64, 1, True), (F64, 1, False)]) for k in range(1, 5)]
        kernels = [f.result(timeout=300) for f in futures]
        x, out = np.arange(4.0) + 1, np.zeros(4)
        values = []
        for kernel in kernels:
            kernel(x, out)
            values.append(out[0])
        print(json.dumps({"values": values, "children": len(compile_process.child_pids()),
                          "threads": cache._executor._max_workers,
                          "hits": [sum(k.stats.cache_hits.values()) for k in kernels]}))
    """, tmp_path, PJRTKIT_CPU_COMPILE_PROCESSES="2")
    assert found["values"] == [1.0, 2.0, 3.0, 4.0]
    assert found["threads"] == 2 and found["children"] == 2, found
    assert found["hits"] == [1, 1, 1, 1]


@pytest.mark.skipif(not hasattr(os, "kill") or sys.platform == "win32", reason="POSIX signals")
def test_after_max_deaths_compiles_stay_in_this_process(tmp_path):
    # The give-up path runs while the compile thread holds its child's lock: it must not wait
    # for that lock (the subprocess's timeout would catch a hang).
    found = _run("""
        compile_process.MAX_DEATHS = 1
        killed = cache.compile_async(
            "import os, signal\\nos.kill(os.getpid(), signal.SIGKILL)\\n"
            + source(["out[0] = x[0]"]), [(F64, 1, True), (F64, 1, False)])
        try:
            killed.result(timeout=300)
        except Exception:
            pass
        after = run(["for i in range(x.shape[0]):", "    out[i] = x[i] * 5.0"])
        print(json.dumps({"after": after, "given_up": compile_process._pool.given_up}))
    """, tmp_path)
    assert found["after"]["out"] == [0.0, 5.0, 10.0, 15.0]
    assert found["after"]["misses"] == 1  # compiled here: no child took it
    assert "1 compile processes ended while compiling" in found["given_up"], found


def test_the_load_runs_at_the_short_switch_interval_and_gives_the_callers_back(tmp_path):
    # The parent's load gives the GIL up at every file read; beside a program running
    # interpreted, each wait to get it back lasted the caller's switch interval.
    found = _run("""
        from pjrtkit.switch_interval import SHORT_SWITCH_INTERVAL_S
        seen = []
        load = compile_process.import_and_compile

        def recording(*args):
            seen.append(sys.getswitchinterval())
            return load(*args)

        compile_process.import_and_compile = recording
        sys.setswitchinterval(0.004)
        result = run(["for i in range(x.shape[0]):", "    out[i] = x[i] - 1.0"])
        result.update(seen=seen, short=SHORT_SWITCH_INTERVAL_S, after=sys.getswitchinterval())
        print(json.dumps(result))
    """, tmp_path)
    assert found["out"] == [-1.0, 0.0, 1.0, 2.0]
    assert found["seen"] and max(found["seen"]) <= found["short"], found
    assert found["after"] == pytest.approx(0.004)
