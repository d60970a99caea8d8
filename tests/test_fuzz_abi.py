"""The C ABI fuzz harness (``make fuzz`` runs 10,000 cases per target; CI 500): a short
campaign per target ends with no abort and no bug, the harness counts an abort and goes on, and
the bugs it found stay fixed (each checked in a fresh process, as a C caller would meet it)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pjrtkit_tools.fuzz_abi import TARGETS, run_campaign

CASES = 150


@pytest.mark.parametrize("target", TARGETS)
def test_short_campaign_has_no_aborts_and_no_bugs(target):
    summary = run_campaign(target, CASES, seed=1)
    assert summary["cases"] == CASES
    assert summary["aborts"] == [] and summary["bugs"] == {}, summary
    assert not any(o.startswith("harness-error") for o in summary["outcomes"]), summary
    assert summary["outcomes"].get("ok", 0) > 0  # calls do get through, not only refusals


def test_the_harness_counts_an_abort_and_goes_on(monkeypatch):
    monkeypatch.setenv("PJRTKIT_FUZZ_ABORT_AT", "3")
    summary = run_campaign("args", 8, seed=1)
    assert summary["aborts"] == [3] and summary["cases"] == 8, summary
    assert summary["outcomes"]["abort"] == 1


def _through_the_abi(code: str, **env: str) -> list[str]:
    prelude = """
        import numpy as np
        from pjrtkit.abi._cffi import ffi
        from pjrtkit.discovery import load_backend
        from pjrtkit.conformance.abi_driver import AbiDriver
        d = AbiDriver.from_backend(load_backend("cpu"))
        d.initialize()
    """
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **env}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(prelude) +
                             textwrap.dedent(code)], capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()


def test_error_functions_take_null_args():
    # Found by the fuzzer: PJRT_Error_GetCode(NULL) (and Message, Destroy) crashed the process.
    lines = _through_the_abi("""
        for name in ("PJRT_Error_GetCode", "PJRT_Error_Message", "PJRT_Error_Destroy"):
            d.function(name)(ffi.NULL)
        error = d.function("PJRT_Error_GetCode")(ffi.NULL)
        print("alive", error == ffi.NULL)
    """)
    assert lines == ["alive True"]  # GetCode never fails (jaxlib aborts on its errors)


def test_an_argument_of_the_wrong_shape_is_invalid_argument_at_execute():
    # Found by the fuzzer: an f32[3] buffer passed where the program takes f32[4] reached the
    # kernel (INTERNAL "operands could not be broadcast"); a matching-size mistake would have
    # been a silently wrong answer.
    lines = _through_the_abi("""
        loaded = d.compile(lambda x: x + 1.0, np.zeros(4, np.float32))
        for value in (np.ones(3, np.float32), np.ones(4, np.int32), np.ones((2, 2), np.float32)):
            args = d.execute_args(loaded, [[d.put(value)]], 1)
            error = d.raw("PJRT_LoadedExecutable_Execute", args)
            print(error.code.name, str(error))
        out, _ = d.execute(loaded, [[d.put(np.ones(4, np.float32))]], 1)
        print(d.to_host(out[0][0]).tolist())
    """)
    assert lines[:3] == [
        "INVALID_ARGUMENT argument 0 of jit__lambda is float32[3], the program takes float32[4]",
        "INVALID_ARGUMENT argument 0 of jit__lambda is int32[4], the program takes float32[4]",
        "INVALID_ARGUMENT argument 0 of jit__lambda is float32[2, 2], the program takes float32[4]"]
    assert lines[3] == "[2.0, 2.0, 2.0, 2.0]"


def test_host_data_too_big_for_the_limit_is_refused_before_it_is_read():
    # dims that promise far more than the 16 bytes passed: past the limit nothing is read (the
    # 4 GiB read used to run off the caller's array), and int64-overflowing dims are refused
    # too (they were INTERNAL).
    lines = _through_the_abi("""
        data = ffi.new("char[]", 16)
        for dims in ([1 << 30], [1 << 32, 1 << 32], [-1, 4]):
            c_dims = ffi.new("int64_t[]", dims)
            args = d.new_args("PJRT_Client_BufferFromHostBuffer", client=d.client, data=data,
                              type=11, dims=c_dims, num_dims=len(dims), device=d.device())
            error = d.raw("PJRT_Client_BufferFromHostBuffer", args)
            print(error.code.name)
    """, PJRTKIT_CPU_MEMORY_LIMIT="64M")
    assert lines == ["RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED", "INVALID_ARGUMENT"]
