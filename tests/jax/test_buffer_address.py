"""``jax.Array.unsafe_buffer_pointer()`` on pjrtkit_cpu (PJRT_Buffer_UnsafePointer through
``pjrtkit_buffer_address``): the payload's real address, equal for the same array and for a
conversion JAX makes without computing, different for a computed result; an error for a
deleted array."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax


def _ptr(x):
    return x.unsafe_buffer_pointer()


def test_the_same_array_has_the_same_address(devices):
    device, _ = devices
    x = jax.device_put(np.arange(10, dtype=np.float32), device)
    assert _ptr(x) == _ptr(jnp.asarray(x)) != 0
    assert _ptr(x) == _ptr(lax.convert_element_type(x, np.float32))


def test_a_computed_result_has_its_own_address(devices):
    device, _ = devices
    x = jax.device_put(np.zeros(5, np.float32), device)
    assert _ptr(x) != _ptr(lax.convert_element_type(x, np.int32))
    assert _ptr(x) != _ptr(jax.jit(lambda v: v + 1)(x))


def test_the_address_holds_the_array(devices):
    """The address is where the values are: reading it back through ctypes gives them."""
    import ctypes

    device, _ = devices
    values = np.arange(6, dtype=np.int32) * 7
    x = jax.device_put(values, device)
    seen = np.ctypeslib.as_array((ctypes.c_int32 * 6).from_address(_ptr(x)))
    np.testing.assert_array_equal(seen, values)


def test_a_deleted_array_has_no_address(devices):
    device, _ = devices
    x = jax.device_put(np.ones(3, np.float32), device)
    x.delete()
    with pytest.raises(Exception, match="deleted"):
        _ptr(x)


def test_outputs_never_share_an_inputs_or_each_others_buffer_as_on_xla(devices):
    """XLA gives every output its own buffer: a pass-through output, an output returned twice
    and a constant output get fresh ones on both backends."""
    for device in devices:
        x = jax.device_put(np.arange(3, dtype=np.int32), device)
        assert _ptr(jax.jit(lambda v: v)(x)) != _ptr(x), device.platform
        z1, z2 = jax.jit(lambda v: (v, v))(x)
        assert _ptr(z1) != _ptr(z2), device.platform
        y1, y2 = jax.device_put((np.array([1, 2]), np.array([2, 3])), device)
        a, b, c = jax.jit(lambda p, q: (q, np.arange(4), p))(y1, y2)
        assert _ptr(a) != _ptr(y2) and _ptr(c) != _ptr(y1), device.platform
        constant = jax.jit(lambda: np.arange(4, dtype=np.float32))
        assert _ptr(constant()) != _ptr(constant()), device.platform
        np.testing.assert_array_equal(b, np.arange(4))
