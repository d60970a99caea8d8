"""The cpu backend's hooks through the typed facade, and how the facade reports failures."""
import types

import numpy as np
import pytest

from pjrtkit import hookimpl
from pjrtkit.backend import Backend
from pjrtkit.errors import ErrorCode, Internal, InvalidArgument, PjrtError, Unimplemented
from pjrtkit.testing.programs import lower_program
from pjrtkit.types import CompileOptions, MemoryStats, PlatformInfo


@pytest.fixture(scope="module")
def cpu():
    import pjrtkit_cpu.plugin
    return Backend("cpu", pjrtkit_cpu.plugin, "test")


def test_pjrtkit_platform(cpu):
    assert cpu.platform.name == "pjrtkit_cpu" == cpu.platform_name
    assert cpu.platform.device_kind == "cpu"


def test_pjrtkit_client_topology_counts_devices(cpu, monkeypatch):
    assert len(cpu.client_topology(options={}).devices) == 1
    monkeypatch.setenv("PJRTKIT_CPU_DEVICES", "4")
    devices = cpu.client_topology(options={}).devices
    assert [d.id for d in devices] == [0, 1, 2, 3]
    assert [d.local_hardware_id for d in devices] == [0, 1, 2, 3]
    monkeypatch.setenv("PJRTKIT_CPU_DEVICES", "four")
    with pytest.raises(InvalidArgument, match="PJRTKIT_CPU_DEVICES"):
        cpu.client_topology(options={})


def test_pjrtkit_make_topology_is_separate_from_the_client(cpu):
    """pjrtkit_make_topology answers for AOT topologies without touching the client's."""
    topology = cpu.make_topology(name="cpu:8", options={})
    assert len(topology.devices) == 8
    assert len(cpu.client_topology(options={}).devices) == 1
    with pytest.raises(InvalidArgument, match="unknown topology name 'v5e:2x2'"):
        cpu.make_topology(name="v5e:2x2", options={})


def test_pjrtkit_transfer_to_device_and_back(cpu):
    """pjrtkit_transfer_to_device then pjrtkit_transfer_to_host round-trips every kind."""
    device = cpu.client_topology(options={}).devices[0]
    for kind in ("device", "pinned_host", "unpinned_host"):
        array = np.arange(6, dtype=np.int16).reshape(2, 3)
        payload = cpu.transfer_to_device(array=array, device=device, memory_kind=kind)
        back = cpu.transfer_to_host(payload=payload, device=device, memory_kind=kind)
        np.testing.assert_array_equal(back, array)


def test_pjrtkit_copy_buffer_does_not_share_storage(cpu):
    """pjrtkit_copy_buffer must not alias: donation may later reuse either side."""
    device = cpu.client_topology(options={}).devices[0]
    payload = np.ones(4, np.float32)
    copy = cpu.copy_buffer(payload=payload, src_device=device, src_memory_kind="device",
                           dst_device=device, dst_memory_kind="pinned_host")
    assert not np.shares_memory(copy, payload)
    np.testing.assert_array_equal(copy, payload)


def test_pjrtkit_memory_stats_reports_tracked_and_limit(cpu):
    """pjrtkit_memory_stats: the cpu backend reports what the core tracked."""
    device = cpu.client_topology(options={}).devices[0]
    tracked = MemoryStats(bytes_in_use=128, peak_bytes_in_use=256, num_allocs=2,
                          largest_alloc_size=128, bytes_limit=1 << 30)
    assert cpu.memory_stats(device=device, tracked=tracked) == tracked


def test_pjrtkit_compile_and_pjrtkit_execute(cpu):
    import jax.numpy as jnp
    program = lower_program(lambda x, y: (x * 2 + y, x - y), jnp.ones(3, jnp.float32),
                            jnp.ones(3, jnp.float32))
    options = CompileOptions(1, 1, None, False)
    devices = cpu.client_topology(options={}).devices[:1]
    compiled = cpu.compile(program=program, options=options, devices=devices)
    assert compiled.cost.flops > 0
    x = np.array([1, 2, 3], np.float32)
    y = np.array([10, 20, 30], np.float32)
    (out,) = cpu.execute(executable=compiled.executable, arguments=[[x, y]], devices=devices)
    np.testing.assert_array_equal(out[0], x * 2 + y)
    np.testing.assert_array_equal(out[1], x - y)


def test_compile_rejects_a_missing_op_with_unimplemented(cpu):
    import jax
    import jax.numpy as jnp
    program = lower_program(lambda x: jax.lax.fft(x, "FFT", (4,)), jnp.ones(4, jnp.complex64))
    with pytest.raises(Unimplemented) as info:
        cpu.compile(program=program, options=CompileOptions(1, 1, None, False),
                    devices=cpu.client_topology(options={}).devices[:1])
    assert "pjrtkit_cpu" in str(info.value)
    assert info.value.code == ErrorCode.UNIMPLEMENTED


def _raising_plugin():
    @hookimpl
    def pjrtkit_platform():
        return PlatformInfo("pjrtkit_broken", "0", "cpu")

    @hookimpl
    def pjrtkit_client_topology(options):
        raise ZeroDivisionError("boom")

    @hookimpl
    def pjrtkit_compile(program, options, devices):
        raise InvalidArgument("bad program on purpose")

    module = types.ModuleType("broken")
    module.pjrtkit_platform = pjrtkit_platform
    module.pjrtkit_client_topology = pjrtkit_client_topology
    module.pjrtkit_compile = pjrtkit_compile
    return module


def test_a_python_exception_in_a_hook_becomes_internal_naming_the_hook():
    backend = Backend("broken", _raising_plugin())
    with pytest.raises(Internal) as info:
        backend.client_topology(options={})
    assert info.value.code == ErrorCode.INTERNAL
    assert "pjrtkit_client_topology" in str(info.value)
    assert "ZeroDivisionError: boom" in str(info.value)
    assert "pjrtkit_broken" in str(info.value)


def test_a_pjrt_error_in_a_hook_keeps_its_code():
    backend = Backend("broken", _raising_plugin())
    with pytest.raises(PjrtError) as info:
        backend.compile(program=None, options=None, devices=())
    assert info.value.code == ErrorCode.INVALID_ARGUMENT


def test_a_missing_mandatory_hook_is_unimplemented_naming_it():
    backend = Backend("broken", _raising_plugin())
    with pytest.raises(Unimplemented, match="pjrtkit_execute"):
        backend.execute(executable=None, arguments=[], devices=())
