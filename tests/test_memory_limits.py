"""Memory limits in the runtime: a plugin's per-device capacity (the HBM mechanism), the host
pool every host-backed memory of a client shares, PJRTKIT_<BACKEND>_MEMORY_LIMIT, and host
allocation failures (MemoryError) as RESOURCE_EXHAUSTED. Through JAX on pjrtkit_cpu:
tests/jax/test_memory_limits_through_jax.py."""
from __future__ import annotations

import hbm_backend
import numpy as np
import pytest

from pjrtkit import hookimpl
from pjrtkit.backend import Backend
from pjrtkit.errors import ErrorCode, PjrtError, ResourceExhausted
from pjrtkit.runtime.client import Client
from pjrtkit.runtime.memory_limits import MemoryPool, parse_size

KIB = 1 << 10


@pytest.fixture
def hbm_client(monkeypatch):
    monkeypatch.delenv("PJRTKIT_HBM_MEMORY_LIMIT", raising=False)
    client = Client(Backend("hbm", hbm_backend, "test"), {})
    yield client
    client.destroy()


def _array(kib: int) -> np.ndarray:
    return np.ones(kib * KIB // 4, np.float32)


def test_a_declared_capacity_is_a_per_device_limit_that_holds(hbm_client):
    dev0, dev1 = hbm_client.devices
    first = hbm_client.buffer_from_host(_array(600), device=dev0)
    with pytest.raises(ResourceExhausted) as info:
        hbm_client.buffer_from_host(_array(600), device=dev0)
    message = str(info.value)
    assert "614400 bytes" in message and "1048576 bytes" in message, message
    assert "float32[153600]" in message and "hbm:0" in message, message
    stats = dev0.memory_stats()
    assert (stats.bytes_in_use, stats.num_allocs, stats.bytes_limit) == (600 * KIB, 1, 1 << 20)
    # The other device has its own memory, and the first device works again once freed.
    hbm_client.buffer_from_host(_array(600), device=dev1)
    first.destroy()
    assert dev0.memory_stats().bytes_in_use == 0
    hbm_client.buffer_from_host(_array(600), device=dev0)
    assert dev0.memory_stats().peak_bytes_in_use == 600 * KIB


def test_host_memories_of_all_devices_share_one_pool(hbm_client):
    dev0, dev1 = hbm_client.devices
    pool = hbm_client.host_pool
    assert dev0.memory("pinned_host").pool is pool is dev1.memory("pinned_host").pool
    assert dev0.memory("device").pool is None  # its own HBM, not the host's
    a = hbm_client.buffer_from_host(_array(4), memory=dev0.memory("pinned_host"))
    hbm_client.buffer_from_host(_array(8), memory=dev1.memory("pinned_host"))
    assert pool.bytes_in_use == 12 * KIB
    assert dev0.memory("pinned_host").stats().pool_bytes == 12 * KIB
    assert dev0.memory("pinned_host").stats().bytes_in_use == 4 * KIB
    a.destroy()
    assert pool.bytes_in_use == 8 * KIB and pool.peak_bytes_in_use == 12 * KIB


def test_the_host_pool_limit_holds_across_devices(hbm_client):
    dev0, dev1 = hbm_client.devices
    hbm_client.host_pool.limit_bytes = 16 * KIB  # as if the host had 16 KiB
    hbm_client.buffer_from_host(_array(10), memory=dev0.memory("pinned_host"))
    with pytest.raises(ResourceExhausted, match="host memory shared by the 2 device"):
        hbm_client.buffer_from_host(_array(10), memory=dev1.memory("pinned_host"))
    assert hbm_client.host_pool.bytes_in_use == 10 * KIB
    assert dev1.memory("pinned_host").stats().bytes_in_use == 0


def test_the_setting_lowers_every_devices_default_memory(monkeypatch):
    monkeypatch.setenv("PJRTKIT_HBM_MEMORY_LIMIT", "256K")
    client = Client(Backend("hbm", hbm_backend, "test"), {})
    try:
        for device in client.devices:
            assert device.memory_stats().bytes_limit == 256 * KIB
            with pytest.raises(ResourceExhausted, match="262144 bytes"):
                client.buffer_from_host(_array(300), device=device)
            client.buffer_from_host(_array(200), device=device)
    finally:
        client.destroy()


@pytest.mark.parametrize("text, expected", [("1024", 1024), ("4k", 4096), ("3M", 3 << 20),
                                            ("2GiB", 2 << 30), ("1T", 1 << 40)])
def test_sizes_parse(text, expected):
    assert parse_size(text, "V") == expected


@pytest.mark.parametrize("text", ["", "0", "-5", "lots", "1.5G", "4X"])
def test_bad_sizes_are_invalid_argument_naming_the_variable(text):
    with pytest.raises(PjrtError, match="PJRTKIT_HBM_MEMORY_LIMIT") as info:
        parse_size(text, "PJRTKIT_HBM_MEMORY_LIMIT")
    assert info.value.code == ErrorCode.INVALID_ARGUMENT


def test_a_refused_allocation_leaves_the_pool_unchanged():
    pool = MemoryPool("test pool", 100)
    pool.take(60, lambda: "x")
    with pytest.raises(ResourceExhausted, match="test pool would exceed its limit of 100 bytes"):
        pool.take(41, lambda: "allocating 41 bytes")
    pool.take(0, lambda: "x")  # nothing is always possible
    assert (pool.bytes_in_use, pool.peak_bytes_in_use) == (60, 60)


def test_a_hook_running_out_of_host_memory_is_resource_exhausted(hbm_client, monkeypatch):
    @hookimpl
    def out_of_memory(array, device, memory_kind):
        raise MemoryError(f"Unable to allocate {array.nbytes} bytes")

    monkeypatch.setattr(hbm_backend, "pjrtkit_transfer_to_device", out_of_memory)
    client = Client(Backend("hbm", hbm_backend, "test"), {})
    try:
        with pytest.raises(ResourceExhausted, match="out of memory.*Unable to allocate 4096"):
            client.buffer_from_host(_array(4), device=client.devices[0])
        assert client.devices[0].memory_stats().bytes_in_use == 0  # nothing stays counted
    finally:
        client.destroy()


def test_check_room_refuses_without_counting(hbm_client):
    device = hbm_client.devices[0]
    before = device.memory_stats()
    with pytest.raises(ResourceExhausted, match="float32\\[1048576\\]"):
        hbm_client.check_room((1 << 20,), np.float32, device=device)
    hbm_client.check_room((16,), np.float32, device=device)
    assert device.memory_stats() == before  # a check is not an allocation
