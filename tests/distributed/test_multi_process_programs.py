"""Programs users write under jax.distributed, on pjrtkit_cpu against XLA's CPU backend with
the same number of processes (and 2 devices in each): every collective JAX emits on cpu over
every dtype (shard_map), reductions a sharded jit makes, make_array_from_process_local_data,
multihost_utils, pmap across processes, host callbacks. Each process's results must match.

Both jobs run as real processes joined by jax.distributed (tests/distributed/mp_worker.py);
collectives across processes go through the default engine (gloo via torch.distributed).
"""
from __future__ import annotations

import pathlib
import sys

import pytest

from pjrtkit.testing.tolerances import assert_close

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import mp_launch  # noqa: E402
import mp_worker  # noqa: E402

pytest.importorskip("torch", reason="the gloo engine needs torch (pip install 'pjrtkit[gloo]')")
pytestmark = pytest.mark.xdist_group("multi_process")

# Compared with XLA's CPU backend (store_traffic reads pjrtkit's own counters).
CASES = sorted(set(mp_worker.CASES) - {"store_traffic"})


def _jobs(tmp_path_factory, num_processes):
    out = tmp_path_factory.mktemp(f"jobs{num_processes}")
    jobs = {}
    for platform in ("cpu", "pjrtkit_cpu"):
        jobs[platform] = mp_launch.run_job(platform, num_processes, sorted(mp_worker.CASES),
                                           out / platform)
        # this job's devices, whatever job runs later in the session
        jobs[f"{platform} devices"] = mp_launch.last_devices[platform]
    return jobs


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    return _jobs(tmp_path_factory, 2)


@pytest.fixture(scope="module")
def four_processes(tmp_path_factory):
    return _jobs(tmp_path_factory, 4)


def _compare(jobs, name, num_processes):
    for process in range(num_processes):
        theirs, ours = jobs["cpu"][process][name], jobs["pjrtkit_cpu"][process][name]
        assert not isinstance(theirs, str), f"XLA's CPU backend failed {name}:\n{theirs}"
        assert not isinstance(ours, str), f"pjrtkit_cpu failed {name}:\n{ours}"
        assert sorted(ours) == sorted(theirs)
        for key in theirs:
            assert_close(ours[key], theirs[key], what=f"{name}.{key} in process {process}")


@pytest.mark.parametrize("name", CASES)
def test_two_processes_match_xla(two_processes, name):
    _compare(two_processes, name, 2)


@pytest.mark.many_processes
@pytest.mark.parametrize("name", CASES)
def test_four_processes_match_xla(four_processes, name):
    _compare(four_processes, name, 4)


def test_every_process_sees_the_global_devices(two_processes):
    """Device ids identical in every process (numbered process by process), process indices
    right, each process's own devices its local ones."""
    ours = two_processes["pjrtkit_cpu devices"]
    assert ours[0]["devices"] == ours[1]["devices"] == [[0, 0], [1, 0], [2, 1], [3, 1]]
    assert [ours[p]["local"] for p in (0, 1)] == [[0, 1], [2, 3]]
    assert [ours[p]["process_index"] for p in (0, 1)] == [0, 1]
    assert {ours[p]["platform"] for p in (0, 1)} == {"pjrtkit_cpu"}


def test_collectives_cover_every_dtype_and_kind():
    """The cases exercise all_reduce (add, max, min; and multiply, and, or through jit),
    all_gather, reduce_scatter, all_to_all and collective_permute, over these dtypes."""
    dtypes = {n.split("_", 1)[1] for n in CASES if n.startswith("collectives_")}
    assert dtypes == {"float32", "bfloat16", "float16", "int32", "int8", "uint8", "bool",
                      "complex64"}


def test_the_key_value_store_carries_rendezvous_only(two_processes):
    """The store moves topologies and engine addresses (a few KiB, once), never array data:
    20 steps that all-reduce, permute and all-gather 1 MiB per process add nothing to it."""
    job = two_processes["pjrtkit_cpu"]
    for process in (0, 1):
        traffic = job[process]["store_traffic"]
        assert not isinstance(traffic, str), traffic
        assert int(traffic["during"]) == 0
        assert int(traffic["before"]) < 16 * 1024
        assert int(traffic["array_bytes_moved"]) > 40 * 1024 * 1024
