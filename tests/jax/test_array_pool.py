"""The array pool (``pjrtkit.abi.array_pool``): NumPy's allocator on the threads that run
kernels, once a client exists. Each scenario runs in a fresh interpreter (``run_python``): the
pool is process-wide and its setting is read when the first client is created."""
from __future__ import annotations

import json
import textwrap

import pytest

PRELUDE = """
import json, threading
import numpy as np, jax, jax.numpy as jnp
from pjrtkit.abi import array_pool
from pjrtkit.kernel_threads import kernel_thread
try:
    from numpy._core.multiarray import get_handler_name
except ImportError:  # NumPy 1.x
    from numpy.core.multiarray import get_handler_name

dev, cpu = jax.devices("pjrtkit_cpu")[0], jax.devices("cpu")[0]

def on_kernel_thread(fn):
    box = []
    thread = threading.Thread(target=kernel_thread(lambda: box.append(fn())))
    thread.start()
    thread.join()
    return box[0]
"""


@pytest.fixture
def scenario(run_python, tmp_path):
    def run(code: str, **env) -> dict:
        out = run_python(PRELUDE + textwrap.dedent(code), JAX_PLATFORMS="pjrtkit_cpu,cpu",
                         PJRTKIT_CACHE_DIR=str(tmp_path), **env)
        assert out.returncode == 0, out.stderr[-4000:]
        assert "Traceback" not in out.stderr, out.stderr[-4000:]
        return {**json.loads(out.stdout.strip().splitlines()[-1]), "stderr": out.stderr}
    return run


def test_kernel_threads_allocate_from_the_pool_and_reuse_freed_blocks(scenario):
    result = scenario("""
        def work():
            seen = {"name": get_handler_name(np.empty(3))}
            big = np.empty(300_000, np.float32)
            seen["big_name"] = get_handler_name(big)
            seen["aligned"] = big.ctypes.data % 64 == 0
            small = np.empty(5, np.float64)
            seen["small_aligned"] = small.ctypes.data % 16 == 0
            address = big.ctypes.data
            big[:] = 7.0
            before = array_pool.stats()
            del big
            kept = array_pool.stats()
            again = np.zeros(299_000, np.float32)  # same size class: the same block, zeroed
            seen["reused"] = array_pool.stats()["reused"] - kept["reused"]
            seen["same_block"] = again.ctypes.data == address
            seen["zeroed"] = bool((again == 0).all())
            seen["kept_after_free"] = kept["kept_blocks"] - before["kept_blocks"]
            grown = np.arange(100_000, dtype=np.float64)
            grown.resize(400_000, refcheck=False)  # NumPy's realloc
            seen["resized_kept_data"] = bool((grown[:100_000] == np.arange(100_000)).all())
            return seen
        seen = on_kernel_thread(work)
        seen["main_name"] = get_handler_name(np.empty(300_000))
        print(json.dumps(seen))
    """)
    assert result["name"] == result["big_name"] == "pjrtkit_array_pool"
    assert result["main_name"] == "default_allocator"  # only kernel threads use the pool
    assert result["aligned"] and result["small_aligned"]
    assert result["kept_after_free"] == 1
    assert result["same_block"] and result["zeroed"] and result["reused"] == 1
    assert result["resized_kept_data"]


def test_the_pool_keeps_no_more_than_its_limit(scenario):
    result = scenario("""
        def work():
            arrays = [np.empty(1 << 20, np.uint8) for _ in range(8)]  # 1 MiB each
            del arrays
            return array_pool.stats()
        stats = on_kernel_thread(work)
        array_pool.release()
        print(json.dumps({"stats": stats, "released": array_pool.stats()}))
    """, PJRTKIT_ARRAY_POOL_BYTES="3M")
    stats = result["stats"]
    assert stats["limit_bytes"] == 3 << 20
    assert stats["kept_blocks"] == 3 and stats["kept_bytes"] == 3 << 20
    assert stats["evicted"] == 5  # each block past the third made room for itself
    assert result["released"]["kept_bytes"] == 0 and result["released"]["kept_blocks"] == 0


def test_a_full_pool_gives_back_its_oldest_blocks_for_newly_freed_ones(scenario):
    # One program's blocks must not keep the next program's out of a full pool.
    result = scenario("""
        def work():
            old = [np.empty(1 << 20, np.uint8) for _ in range(3)]  # 1 MiB each, freed in order
            addresses = [a.ctypes.data for a in old]
            for i in range(3):
                old[i] = None
            full = array_pool.stats()
            new = np.empty(2 << 20, np.uint8)  # another size class, freed into a full pool
            new_address = new.ctypes.data
            del new
            after = array_pool.stats()
            again = np.empty(2 << 20, np.uint8)
            kept_old = np.empty(1 << 20, np.uint8)
            return {"full": full, "after": after, "again": again.ctypes.data == new_address,
                    "kept_old": addresses.index(kept_old.ctypes.data)
                    if kept_old.ctypes.data in addresses else -1}
        print(json.dumps(on_kernel_thread(work)))
    """, PJRTKIT_ARRAY_POOL_BYTES="3M")
    assert result["full"]["kept_bytes"] == 3 << 20
    after = result["after"]
    # the two blocks freed first made room; the one freed last stays
    assert after["evicted"] - result["full"]["evicted"] == 2
    assert after["kept_blocks"] == 2 and after["kept_bytes"] == 3 << 20
    assert result["again"]
    assert result["kept_old"] == 2


def test_a_program_run_again_reuses_its_blocks_and_matches_xla(scenario):
    result = scenario("""
        def step(w, x):
            h = jnp.tanh(x @ w)
            return h.T @ h, jnp.exp(h) * 2.0
        rng = np.random.default_rng(0)
        w = rng.standard_normal((256, 512), np.float32) / 16
        x = rng.standard_normal((256, 256), np.float32)
        f = jax.jit(step)
        ours = f(jax.device_put(w, dev), jax.device_put(x, dev))
        jax.block_until_ready(ours)
        start = array_pool.stats()
        for _ in range(10):
            ours = jax.block_until_ready(f(jax.device_put(w, dev), jax.device_put(x, dev)))
        end = array_pool.stats()
        theirs = jax.jit(step)(jax.device_put(w, cpu), jax.device_put(x, cpu))
        close = all(np.allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-5)
                    for a, b in zip(ours, theirs))
        print(json.dumps({"reused": end["reused"] - start["reused"], "close": close}))
    """)
    assert result["close"]
    assert result["reused"] >= 10  # every call's large arrays came back from the pool


def test_zero_turns_the_pool_off(scenario):
    result = scenario("""
        name = on_kernel_thread(lambda: get_handler_name(np.empty(300_000)))
        print(json.dumps({"name": name, "stats": array_pool.stats()}))
    """, PJRTKIT_ARRAY_POOL_BYTES="0")
    assert result["name"] == "default_allocator"
    assert result["stats"]["fresh"] == 0 and result["stats"]["reused"] == 0


def test_a_malformed_limit_warns_and_keeps_the_default(scenario):
    result = scenario("""
        name = on_kernel_thread(lambda: get_handler_name(np.empty(300_000)))
        print(json.dumps({"name": name, "limit": array_pool.stats()["limit_bytes"]}))
    """, PJRTKIT_ARRAY_POOL_BYTES="lots")
    assert result["name"] == "pjrtkit_array_pool"
    assert result["limit"] == 256 << 20
    assert "PJRTKIT_ARRAY_POOL_BYTES='lots' is not a size" in result["stderr"]


def test_capsules_do_not_depend_on_what_others_set_on_ctypes_pythonapi(run_python, tmp_path):
    # ctypes.pythonapi hands every caller the same function object per name: a library that
    # sets its argtypes otherwise must not break registering a backend or the pool.
    out = run_python("""
        import ctypes
        import pjrtkit.abi.api, pjrtkit.abi.array_pool  # noqa: F401 - loaded first, then:
        ctypes.pythonapi.PyCapsule_New.argtypes = (ctypes.c_void_p, ctypes.c_char_p,
                                                   ctypes.c_void_p)
        ctypes.pythonapi.PyCapsule_GetPointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
        import numpy as np, jax
        x = jax.device_put(np.arange(4.0), jax.devices("pjrtkit_cpu")[0])
        from pjrtkit.abi import array_pool
        print(float((x * 2).sum()), array_pool.stats()["limit_bytes"])
    """, JAX_PLATFORMS="pjrtkit_cpu", PJRTKIT_CACHE_DIR=str(tmp_path))
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout.split()[-2:] == ["12.0", str(256 << 20)]
