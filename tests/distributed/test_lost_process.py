"""A process killed while the others wait in a collective: their collective fails with an error
that names the lost process, long before jaxlib's heartbeat (set to 300 s here) would notice,
and they exit non-zero within 60 s. After that error jaxlib's own shutdown of the distributed
runtime (a barrier the dead process never reaches, shutdown_timeout_seconds=10) reports the
failure and may abort the process: XLA's CPU backend ends the same way (the second test)."""
from __future__ import annotations

import pathlib
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import mp_launch  # noqa: E402

pytest.importorskip("torch", reason="the gloo engine needs torch (pip install 'pjrtkit[gloo]')")
pytestmark = pytest.mark.xdist_group("multi_process")

SCRIPT = pathlib.Path(__file__).with_name("mp_failure.py")
PROCESSES = 3


def _run(platform, out):
    procs = mp_launch.start_processes(SCRIPT, PROCESSES, mp_launch.job_env(platform, 1), [
        "--out", str(out)], out)
    codes = mp_launch.wait_all(procs, 240)
    ended = time.time()
    killed_at = float((out / "killed_at").read_text())
    results = [(out / f"result.p{p}").read_text() if (out / f"result.p{p}").exists() else None
               for p in range(PROCESSES - 1)]
    return codes, killed_at, ended, results


@pytest.mark.long  # three JAX processes, one killed: make test-long, which CI runs
def test_the_survivors_error_names_the_lost_process(tmp_path):
    codes, killed_at, ended, results = _run("pjrtkit_cpu", tmp_path)
    assert codes[-1] == -9  # the victim
    for process, result in enumerate(results):
        assert result is not None, (tmp_path / f"log.p{process}.txt").read_text()[-3000:]
        when, message = result.split("\n", 1)
        assert "lost process 2" in message and "has ended" in message, message
        assert float(when) - killed_at < 30  # the engine noticed, not a heartbeat
        assert codes[process] != 0
    assert ended - killed_at < 60


@pytest.mark.long
def test_xla_cpu_survivors_end_the_same_way(tmp_path):
    """The reference: XLA's CPU backend (gloo) fails the collective too, and its processes end
    non-zero; what its error says is XLA's (gloo's connection error)."""
    codes, killed_at, ended, results = _run("cpu", tmp_path)
    assert codes[-1] == -9
    assert all(r is not None and r != "no error" for r in results), results
    assert all(code != 0 for code in codes[:-1])
    assert ended - killed_at < 60
