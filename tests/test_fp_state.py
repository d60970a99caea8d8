"""The floating-point state pjrtkit's work runs in (``pjrtkit.fp_state``): a thread pjrtkit
starts does not inherit subnormal flushing from the thread that started it, and a compile
runs in C's default environment and gives the caller its own state back.

Flushing is set the way a -ffast-math library sets it (x86's FTZ/DAZ bits), so these tests
need x86-64 Linux."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from pjrtkit import fp_state

pytestmark = pytest.mark.skipif(not fp_state.can_set_flush_subnormals(),
                                reason="sets x86's FTZ/DAZ bits (x86-64 Linux only)")


@pytest.fixture
def flushing():
    """The test thread flushes subnormals for the test's length (then its state before)."""
    with fp_state.default_environment():
        fp_state.set_flush_subnormals(True)
        assert fp_state.flushes_subnormals()
        yield


def _seen_on(start) -> bool:
    """Whether the thread that ``start(record)`` starts and runs ``record`` on flushes."""
    seen: list[bool] = []
    done = threading.Event()

    def record(*_args):
        seen.append(fp_state.flushes_subnormals())
        done.set()

    start(record)
    assert done.wait(60), "the thread did not run"
    return seen[0]


def test_a_plain_thread_inherits_flushing_so_the_check_can_fail(flushing):
    assert _seen_on(lambda record: threading.Thread(target=record).start())


def test_python_reads_and_writes_subnormals_as_zero_while_flushing(flushing):
    # Why a compile must not run in the caller's flushing state: generated sources hold
    # literals written with repr and read back by Python's parser.
    assert repr(5e-324) == "0.0" and float("5e-324") == 0.0


def test_clean_thread_starts_in_the_default_environment(flushing):
    assert not _seen_on(
        lambda record: threading.Thread(target=fp_state.clean_thread(record)).start())


def test_the_executor_thread_starts_in_the_default_environment(flushing):
    from pjrtkit.runtime.executor import Executor

    executor = Executor("fp-state-test")
    try:
        assert not _seen_on(executor.submit)
    finally:
        executor.shutdown()


def test_the_device_threads_of_a_launch_start_in_the_default_environment(flushing):
    from pjrtkit.collectives.launch import launch_on_threads
    from pjrtkit.errors import Internal

    seen = launch_on_threads("fp-state-test", 1, 3, lambda position: fp_state.flushes_subnormals(),
                             lambda exc: Internal(str(exc)))
    # device 0 runs on the calling thread (here a flushing one); the started ones do not
    assert seen == [True, False, False]


def test_the_lockstep_pool_starts_in_the_default_environment(flushing, monkeypatch):
    from pjrtkit.collectives import lockstep

    monkeypatch.setattr(lockstep, "_pool", None)
    monkeypatch.setattr(lockstep, "_pool_size", 0)
    pool = lockstep._workers(2)  # noqa: SLF001
    try:
        assert not any(pool.submit(fp_state.flushes_subnormals).result(60) for _ in range(4))
    finally:
        pool.shutdown(wait=False)


def test_a_bounded_call_runs_in_the_default_environment(flushing):
    from pjrtkit.bounded_calls import call_within

    assert not call_within(fp_state.flushes_subnormals, "a test step", timeout_s=60)


def test_default_environment_gives_the_caller_its_state_back(flushing):
    with fp_state.default_environment():
        assert not fp_state.flushes_subnormals()
        assert float(repr(5e-324)) == 5e-324
    assert fp_state.flushes_subnormals()


def test_default_environment_restores_state_after_an_exception(flushing):
    with pytest.raises(ZeroDivisionError), fp_state.default_environment():
        1 / 0  # noqa: B018
    assert fp_state.flushes_subnormals()


def test_reset_thread_clears_flushing(flushing):
    assert fp_state.reset_thread()
    assert not fp_state.flushes_subnormals()
    assert np.float64("5e-324") > 0
