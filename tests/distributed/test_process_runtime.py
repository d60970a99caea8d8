"""The core's multi-process layer without JAX: placement from the create options, the topology
exchange over a key-value store (several clients of one process sharing an in-memory store, the
pattern of XLA's GPU plugin test CreateClientWithKVCallback), refusals, and the engine switch."""
from __future__ import annotations

import dataclasses
import itertools
import threading
import types

import pytest

import template_backend as template
from pjrtkit import hookimpl
from pjrtkit.backend import Backend
from pjrtkit.distributed.engines import choice
from pjrtkit.distributed.engines.base import EngineUnavailable
from pjrtkit.distributed.engines.nccl import UNIQUE_ID_BYTES, NcclEngine, bootstrap_unique_id
from pjrtkit.distributed.placement import Placement, placement_from_options
from pjrtkit.distributed.store import InMemoryStore, PrefixedStore
from pjrtkit.errors import ErrorCode, FailedPrecondition, InvalidArgument, PjrtError
from pjrtkit.runtime.client import Client
from pjrtkit.types import DeviceSpec, MultiProcessSupport, Topology


_names = itertools.count()

# Creating a client for a job needs an engine that can run: the tests that make one offer gloo,
# which needs torch; make installs torch on the default set only (Makefile, GLOO_TORCH).
try:
    import torch  # noqa: F401
    _HAS_TORCH = True
except ImportError:
    _HAS_TORCH = False
needs_gloo = pytest.mark.skipif(not _HAS_TORCH, reason="the gloo engine needs torch, installed "
                                                       "on the default set only")


def _backend(support, topology=None):
    """The template plugin plus pjrtkit_multi_process (and, given, another client topology),
    under a platform name of its own: clients of one platform and process id made again use new
    keys (pjrtkit.distributed.runtime), and every test here plays each process afresh."""
    name = f"mp{next(_names)}"
    hooks = {n: getattr(template, n) for n in dir(template) if n.startswith("pjrtkit_")}
    hooks["pjrtkit_multi_process"] = hookimpl(lambda: support)
    platform = dataclasses.replace(template.pjrtkit_platform(), name=f"pjrtkit_{name}")
    hooks["pjrtkit_platform"] = hookimpl(lambda: platform)
    if topology is not None:
        hooks["pjrtkit_client_topology"] = hookimpl(lambda options: topology(options))
    return Backend(name, types.SimpleNamespace(**hooks), "test")


def _two_devices(options):
    return Topology("two", (DeviceSpec(id=7, kind="t", local_hardware_id=0),
                            DeviceSpec(id=9, kind="t", local_hardware_id=1)))


@pytest.fixture(autouse=True)
def _short_rendezvous(monkeypatch):
    monkeypatch.setenv("PJRTKIT_DISTRIBUTED_TIMEOUT_S", "30")


def _clients(backend, count, store=None, **options):
    """One client per "process", made at once on threads over one store."""
    store = store or InMemoryStore()
    clients, errors = [None] * count, [None] * count

    def make(node):
        try:
            clients[node] = Client(backend, {"node_id": node, "num_nodes": count, **options},
                                   store=store)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            errors[node] = exc

    threads = [threading.Thread(target=make, args=(n,), daemon=True) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return clients, errors, store


@pytest.mark.parametrize("options, expected", [
    ({}, None), ({"num_nodes": 1, "node_id": 0}, None),
    ({"num_nodes": 3, "node_id": 2}, Placement(2, 3)),
    ({"num_nodes": 2, "node_id": 0, "partition_index": 1}, Placement(0, 2, 1)),
])
def test_placement_from_the_create_options(options, expected):
    assert placement_from_options(options, "p") == expected


@pytest.mark.parametrize("options, message", [
    ({"num_nodes": 2}, "node_id=None is not in 0..1"),
    ({"num_nodes": 2, "node_id": 2}, "node_id=2 is not in 0..1"),
    ({"num_nodes": "2", "node_id": 0}, "is not a whole number"),
    ({"node_id": 1}, "without num_nodes > 1"),
])
def test_bad_placement_options_are_invalid_argument(options, message):
    with pytest.raises(InvalidArgument, match=message):
        placement_from_options(options, "p")


@needs_gloo
def test_per_process_topologies_become_one_global_list():
    """Every process reports the same devices: process 0's first, ids 0.. in that order, each
    with its process index; a client addresses (and has memories for) its own only."""
    clients, errors, store = _clients(_backend(MultiProcessSupport(("gloo",)), _two_devices), 3)
    assert errors == [None] * 3
    views = [[(d.id, d.process_index, d.local_hardware_id) for d in c.devices] for c in clients]
    assert views[0] == views[1] == views[2] == [
        (0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1), (4, 2, 0), (5, 2, 1)]
    for node, client in enumerate(clients):
        assert client.process_index == node
        assert [d.id for d in client.addressable_devices] == [2 * node, 2 * node + 1]
        assert {m.devices[0].process_index for m in client.memories} == {node}
        assert client.lookup_addressable_device(1).id == 2 * node + 1
    assert store.traffic.puts == 6  # each process: who it is, its devices


def test_a_single_process_plugin_refuses_a_job():
    with pytest.raises(FailedPrecondition, match="runs in one process only.*pjrtkit_multi_process"):
        Client(Backend("template", template, "test"), {"node_id": 0, "num_nodes": 2},
               store=InMemoryStore())


def test_a_job_without_a_store_is_refused():
    with pytest.raises(FailedPrecondition, match="needs the PJRT host's key-value store"):
        Client(_backend(MultiProcessSupport(("gloo",))), {"node_id": 0, "num_nodes": 2})


@needs_gloo
def test_a_missing_process_is_named(monkeypatch):
    monkeypatch.setenv("PJRTKIT_DISTRIBUTED_TIMEOUT_S", "0.2")
    with pytest.raises(PjrtError, match="waited 0.2 s for process 1's topology") as caught:
        Client(_backend(MultiProcessSupport(("gloo",))), {"node_id": 0, "num_nodes": 2},
               store=InMemoryStore())
    assert caught.value.code == ErrorCode.DEADLINE_EXCEEDED


def _slice(options):
    """A "global" topology: 2 devices per process, ids as a slice numbers them."""
    return Topology("slice", tuple(
        DeviceSpec(id=10 * p + i, kind="s", process_index=p, local_hardware_id=i)
        for p in range(options["num_nodes"]) for i in range(2)))


@needs_gloo
def test_a_global_topology_is_checked_not_renumbered():
    clients, errors, _ = _clients(
        _backend(MultiProcessSupport(("gloo",), global_topology=True), _slice), 2)
    assert errors == [None, None]
    assert [d.id for d in clients[1].devices] == [0, 1, 10, 11]
    assert [d.id for d in clients[1].addressable_devices] == [10, 11]


@needs_gloo
def test_processes_that_disagree_about_a_global_topology_fail():
    def per_node(options):  # process 1 configured another slice
        topology = _slice(options)
        if options["node_id"] == 1:
            return Topology("other", topology.devices[:-1] + (
                DeviceSpec(id=99, kind="s", process_index=1, local_hardware_id=1),))
        return topology

    _, errors, _ = _clients(
        _backend(MultiProcessSupport(("gloo",), global_topology=True), per_node), 2)
    assert all(isinstance(e, InvalidArgument) for e in errors), errors
    assert "every process must configure the same slice" in str(errors[0])


@needs_gloo
def test_a_global_topology_must_cover_every_process():
    def one_process(options):
        return Topology("small", (DeviceSpec(id=0, kind="s"),))

    with pytest.raises(InvalidArgument, match=r"no device for process\(es\) \[1\]"):
        Client(_backend(MultiProcessSupport(("gloo",), global_topology=True), one_process),
               {"node_id": 0, "num_nodes": 2}, store=InMemoryStore())


# -- the engine switch ---------------------------------------------------------------------------
def test_unknown_engine_name(monkeypatch):
    monkeypatch.setenv("PJRTKIT_COLLECTIVES", "carrier-pigeon")
    with pytest.raises(InvalidArgument, match="known engines are gloo, mpi, nccl, rccl"):
        choice.choose_engine(("gloo", "mpi"), "p")


def test_an_engine_the_plugin_does_not_offer(monkeypatch):
    monkeypatch.setenv("PJRTKIT_COLLECTIVES", "nccl")
    with pytest.raises(EngineUnavailable, match="on gloo, mpi only"):
        choice.choose_engine(("gloo", "mpi"), "p")


def test_mpi_outside_an_mpi_launch_says_how_to_start(monkeypatch):
    monkeypatch.setenv("PJRTKIT_COLLECTIVES", "mpi")
    for variable in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
                     "MPI_LOCALRANKID", "HYDI_CONTROL_FD"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(EngineUnavailable, match="mpiexec -n N|mpi4py is not installed"):
        choice.choose_engine(("gloo", "mpi"), "p")


def test_no_engine_at_all_fails_at_client_creation(monkeypatch):
    """Neither torch nor an MPI launch: the client is refused, naming both and the install."""
    monkeypatch.delenv("PJRTKIT_COLLECTIVES", raising=False)
    monkeypatch.setattr("pjrtkit.distributed.engines.gloo.module_missing", lambda m: True)
    monkeypatch.setattr("pjrtkit.distributed.engines.mpi.module_missing", lambda m: True)
    with pytest.raises(FailedPrecondition, match=r"gloo: torch is not installed.*mpi: mpi4py "
                                                 r"is not installed.*pjrtkit\[gloo\]"):
        Client(_backend(MultiProcessSupport(("gloo", "mpi"))), {"node_id": 0, "num_nodes": 2},
               store=InMemoryStore())


def test_automatic_choice_takes_the_first_engine_that_runs(monkeypatch):
    monkeypatch.delenv("PJRTKIT_COLLECTIVES", raising=False)
    monkeypatch.setattr("pjrtkit.distributed.engines.gloo.module_missing", lambda m: False)
    assert choice.choose_engine(("gloo", "mpi"), "p").name == "gloo"


def test_nccl_without_library_or_driver_is_failed_precondition():
    problem = NcclEngine.problem()
    assert problem is not None  # no NVIDIA library or driver on this machine
    assert "libnccl.so.2" in problem or "NVIDIA driver" in problem
    with pytest.raises(EngineUnavailable, match="nccl: "):
        NcclEngine(types.SimpleNamespace())


def test_nccl_bootstrap_puts_only_the_unique_id_in_the_store():
    store = PrefixedStore(InMemoryStore(), "job/")
    made = []

    def make_id():
        made.append(bytes(range(UNIQUE_ID_BYTES)))
        return made[-1]

    ids = [None] * 3

    def member(rank):
        ids[rank] = bootstrap_unique_id(store, "nccl/0,1,2/unique-id", rank, make_id, 5.0)

    threads = [threading.Thread(target=member, args=(r,), daemon=True) for r in (2, 1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(made) == 1 and ids == [made[0]] * 3
    assert store.traffic.bytes_put == UNIQUE_ID_BYTES
    assert store.store.traffic.bytes_got == 2 * UNIQUE_ID_BYTES


EXIT_WHILE_PREPARING = """
import pathlib, sys, time
from pjrtkit.distributed import runtime
from pjrtkit.distributed.engines.base import CollectiveEngine
from pjrtkit.distributed.placement import Placement
from pjrtkit.distributed.store import InMemoryStore
from pjrtkit.types import MultiProcessSupport

class SlowImport(CollectiveEngine):
    name = "slow"

    @classmethod
    def prepare(cls):  # stands in for torch's import (seconds, in C++ much of the time)
        time.sleep(1.0)
        pathlib.Path(sys.argv[1]).write_text("prepared")

runtime.choose_engine = lambda offered, platform: SlowImport
job = runtime.ProcessRuntime("pjrtkit_exit", Placement(0, 2), InMemoryStore(),
                             MultiProcessSupport(("gloo",)))
job.prepare_engine()  # and the process ends at once, as a test file's last line does
"""


def test_a_process_that_ends_while_the_engine_imports_waits_for_the_import(tmp_path):
    # The import runs on a daemon thread; when the interpreter finalized with it still inside
    # torch's import, pthread_exit unwound through torch's C++ frames and aborted the process
    # after its tests had passed (JAX's axis_index_test on 4 processes: 2 of 8 runs ended with
    # SIGABRT, "FATAL: exception not rethrown"). The exit now waits for the thread.
    import subprocess
    import sys

    marker = tmp_path / "marker"
    out = subprocess.run([sys.executable, "-c", EXIT_WHILE_PREPARING, str(marker)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert marker.read_text() == "prepared"
