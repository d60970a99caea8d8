"""Topologies by name against libtpu 0.0.42.1's compile-only topologies of the same name and
options: device_kind, coords, core_on_chip, process_index, slice_index and device order, for
every generation; and ``mesh_utils.create_device_mesh`` / ``create_hybrid_device_mesh`` giving
the physical meshes real TPUs get. libtpu and pjrtkit_tpu each report from a child process."""
from __future__ import annotations

import importlib.util

import pytest
from topology_cases import HYBRID_CASES, MESH_CASES, TOPOLOGY_CASES
from tpu_children import HERE, report_of, require_libtpu, start

from pjrtkit.backend import Backend
from pjrtkit.distributed.store import InMemoryStore
from pjrtkit.errors import InvalidArgument
from pjrtkit.runtime.client import Client
from pjrtkit_tpu.generations import GENERATIONS, generation
from pjrtkit_tpu.topology import (DEFAULT_TOPOLOGY, configured_layout, parse_layout,
                                  parse_setting, slice_topology)

SCRIPT = str(HERE / "topology_cases.py")

# One xdist worker runs this module (make test passes `--dist loadgroup`): its module fixture
# starts child interpreters, and each worker given some of its tests would start them all again.
pytestmark = pytest.mark.xdist_group("test_tpu_topology")


@pytest.fixture(scope="module")
def reports():
    """(libtpu's report, pjrtkit_tpu's report), the two children running side by side."""
    require_libtpu()
    theirs = start([SCRIPT, "tpu"], JAX_PLATFORMS="cpu")
    ours = start([SCRIPT, "pjrtkit_tpu"], JAX_PLATFORMS="pjrtkit_tpu,cpu")
    return report_of(theirs), report_of(ours)


@pytest.mark.parametrize("index", range(len(TOPOLOGY_CASES)),
                         ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in o.items())}"
                              for _, n, o in TOPOLOGY_CASES])
def test_devices_match_libtpu(reports, index):
    theirs, ours = reports
    assert ours["topologies"][index] == theirs["topologies"][index], TOPOLOGY_CASES[index]


def _setting(name, options):
    parts = [name] + [f"{k}={'x'.join(map(str, v)) if isinstance(v, tuple) else v}"
                      for k, v in options.items()]
    return ",".join(parts)


def _hosts(name, options):
    layout = parse_layout(name, options)
    return layout.hosts_per_slice * layout.num_slices


MULTI_HOST = [i for i, (_, name, options) in enumerate(TOPOLOGY_CASES)
              if _hosts(name, options) > 1]


def _job_clients(monkeypatch, setting, count):
    """One pjrtkit_tpu client per process of a ``count``-process job over one key-value store
    (the processes played by threads; what the core does under jax.distributed)."""
    import threading

    import pjrtkit_tpu.plugin

    monkeypatch.setenv("PJRTKIT_TPU_TOPOLOGY", setting)
    monkeypatch.setenv("PJRTKIT_DISTRIBUTED_TIMEOUT_S", "60")
    backend = Backend("tpu", pjrtkit_tpu.plugin, "test")
    store, clients = InMemoryStore(), [None] * count

    def make(node):
        clients[node] = Client(backend, {"node_id": node, "num_nodes": count}, store=store)

    threads = [threading.Thread(target=make, args=(n,), daemon=True) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return clients


def test_at_least_three_multi_host_slices_are_compared():
    assert len(MULTI_HOST) >= 3


@pytest.mark.parametrize("index", MULTI_HOST,
                         ids=[_setting(*TOPOLOGY_CASES[i][1:]) for i in MULTI_HOST])
def test_each_host_process_gets_libtpus_devices(reports, monkeypatch, index):
    """A job with one process per host: every process reports libtpu's devices for the slice
    (ids, kind, coords, core, process index, slice index, order) and addresses exactly the
    devices libtpu gives its process index."""
    theirs = reports[0]["topologies"][index]
    _, name, options = TOPOLOGY_CASES[index]
    clients = _job_clients(monkeypatch, _setting(name, options), _hosts(name, options))
    for process, client in enumerate(clients):
        assert client is not None, f"process {process} did not make its client"
        ours = [[d.id, d.kind, list(d.spec.coords), d.spec.core_on_chip, d.process_index,
                 d.spec.attributes.get("slice_index")] for d in client.devices]
        assert ours == theirs
        assert [d.id for d in client.addressable_devices] == [
            row[0] for row in theirs if row[4] == process]
        assert client.process_index == process


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="a client for a job needs an engine that can run (gloo: torch, "
                           "installed on the default set only)")
def test_processes_must_match_the_hosts_of_the_slice(monkeypatch):
    monkeypatch.setenv("PJRTKIT_TPU_TOPOLOGY", "v5e:4x4")
    import pjrtkit_tpu.plugin

    with pytest.raises(InvalidArgument, match="has 4 host.*started 2 processes"):
        Client(Backend("tpu", pjrtkit_tpu.plugin, "test"), {"node_id": 0, "num_nodes": 2},
               store=InMemoryStore())


def test_every_generation_is_compared():
    assert {g for g, _, _ in TOPOLOGY_CASES} == {g.name for g in GENERATIONS}


@pytest.mark.parametrize("index", range(len(MESH_CASES)),
                         ids=[f"{n}-{'x'.join(map(str, s))}" for n, _, s in MESH_CASES])
def test_create_device_mesh_matches_libtpu(reports, index):
    theirs, ours = reports
    assert ours["meshes"][index] == theirs["meshes"][index], MESH_CASES[index]


@pytest.mark.parametrize("index", range(len(HYBRID_CASES)))
def test_create_hybrid_device_mesh_matches_libtpu(reports, index):
    theirs, ours = reports
    assert ours["hybrid"][index] == theirs["hybrid"][index], HYBRID_CASES[index]


def test_default_is_a_single_host_v5e_8(monkeypatch):
    monkeypatch.delenv("PJRTKIT_TPU_TOPOLOGY", raising=False)
    layout = configured_layout()
    topology = slice_topology(layout, live=True)
    assert layout == parse_setting(DEFAULT_TOPOLOGY)
    assert [d.kind for d in topology.devices] == ["TPU v5 lite"] * 8
    assert topology.attributes["chips_per_host"] == 8
    assert {d.attributes["host_index"] for d in topology.devices} == {0}
    assert all(d.memory_space("device").capacity_bytes == generation("v5e").hbm_bytes
               for d in topology.devices)


def test_the_setting_takes_options(monkeypatch):
    monkeypatch.setenv("PJRTKIT_TPU_TOPOLOGY", "tpu7x:2x2x1, num_slices=2")
    topology = slice_topology(configured_layout(), live=True)
    assert len(topology.devices) == 16
    assert {d.process_index for d in topology.devices} == {0}  # one process runs them all
    assert [d.attributes["slice_index"] for d in topology.devices] == [0] * 8 + [1] * 8
    assert [d.attributes["host_index"] for d in topology.devices] == [0] * 8 + [1] * 8


@pytest.mark.parametrize("name, options, message", [
    ("v9:2x2", {}, "unknown TPU generation"),
    ("v5e", {}, "expected <generation>:<bounds>"),
    ("v5e:2x2x1", {}, "expected 2 positive numbers"),
    ("v4:2x2", {}, "expected 3 positive numbers"),
    ("v5e:1x1", {}, "not divisible by chips_per_host_bounds"),
    ("v5e:2x2", {"megacore": True}, "unexpected options megacore"),
    ("v5e:2x2", {"num_slices": 0}, "out of range"),
    ("v5e:2xa", {}, "not a list of whole numbers"),
])
def test_bad_names_and_options_are_invalid_argument(name, options, message):
    with pytest.raises(InvalidArgument, match=message):
        parse_layout(name, options)


def test_hbm_per_device_is_what_libtpu_says_is_available(reports):
    """A 200 GiB program is refused by both, naming each generation's HBM per device."""
    theirs, ours = reports
    for name in {g for g, _, _ in TOPOLOGY_CASES}:
        gib, ours_bytes = theirs["hbm"][name], ours["hbm"][name]
        assert gib.endswith("G") and ours_bytes.endswith(" bytes"), (name, gib, ours_bytes)
        expected = round(float(gib[:-1]) * (1 << 30))
        assert generation(name).hbm_bytes == expected == int(ours_bytes.split()[0]), name
