"""Host callbacks on pjrtkit_cpu (jax.pure_callback, io_callback, jax.debug.callback/print),
each compared with XLA's CPU backend in this process: same results, same calls in the same
order, same printed text; errors of a callback are errors of that execution."""
from __future__ import annotations

import gc
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

from pjrtkit import callbacks
from pjrtkit.errors import FailedPrecondition
from pjrtkit.testing.tolerances import assert_close


def _data(seed, shape=(4, 3)):
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


def _on_both(devices, fn, *args):
    """fn jitted on pjrtkit_cpu and on XLA's cpu: (pjrtkit outputs, xla outputs) as NumPy."""
    results = []
    for device in devices:
        placed = [jax.device_put(a, device) for a in args]
        out = jax.jit(fn)(*placed)
        jax.effects_barrier()
        results.append([np.asarray(o) for o in jax.tree_util.tree_leaves(out)])
    return results


def test_pure_callback_matches_xla_cpu_and_sees_the_same_arguments(devices):
    seen = {d.platform: [] for d in devices}

    def host_sin(a, b):
        platform = next(iter(a.devices())).platform  # JAX hands callbacks cpu arrays
        seen[current].append((platform, np.asarray(a).copy(), np.asarray(b).copy()))
        return np.sin(np.asarray(a)) * np.asarray(b)

    def f(x, y):
        z = jax.pure_callback(host_sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x * 2, y)
        return z + 1, jnp.sum(z)

    x, y = _data(0), _data(1)
    outputs = []
    for device in devices:
        current = device.platform
        outputs.append(jax.tree_util.tree_map(np.asarray, jax.jit(f)(
            jax.device_put(x, device), jax.device_put(y, device))))
    (ours_z, ours_sum), (ref_z, ref_sum) = outputs
    assert_close(ours_z, ref_z, what="pure_callback result")
    assert_close(ours_sum, ref_sum, what="sum of it")
    ours, ref = (seen[d.platform] for d in devices)
    assert len(ours) == len(ref) == 1
    assert ours[0][0] == ref[0][0] == "cpu"
    for a, b in zip(ours[0][1:], ref[0][1:]):
        assert_close(a, b, what="callback argument")


@pytest.mark.parametrize("vmap_method", ["sequential", "expand_dims", "broadcast_all"])
def test_pure_callback_under_vmap_matches_xla_cpu(devices, vmap_method):
    def f(x, y):
        return jax.pure_callback(lambda a, b: np.asarray(a) * 3 - np.asarray(b),
                                 jax.ShapeDtypeStruct(jnp.broadcast_shapes(x.shape, y.shape),
                                                      x.dtype), x, y, vmap_method=vmap_method)

    ours, ref = _on_both(devices, jax.vmap(f, in_axes=(0, None)), _data(2, (5, 3)), _data(3, (3,)))
    assert_close(ours[0], ref[0], what=f"vmap({vmap_method})")


def test_ordered_io_callback_in_a_scan_calls_in_order_like_xla_cpu(devices):
    calls = {d.platform: [] for d in devices}

    def f(x):
        def step(carry, i):
            def record(c, j):
                calls[current].append((float(np.asarray(j)), np.asarray(c).copy()))
                return np.asarray(c) * 0.5
            half = io_callback(record, jax.ShapeDtypeStruct(carry.shape, carry.dtype),
                               carry, i, ordered=True)
            return carry + half + i, jnp.sum(half)
        # float32 steps whatever jax_enable_x64 another test left behind
        return jax.lax.scan(step, x, jnp.arange(4, dtype=jnp.float32))

    outputs = []
    for device in devices:
        current = device.platform
        outputs.append([np.asarray(o) for o in jax.jit(f)(jax.device_put(_data(4, (3,)), device))])
        jax.effects_barrier()
    for a, b in zip(*outputs):
        assert_close(a, b, what="scan outputs")
    ours, ref = (calls[d.platform] for d in devices)
    assert [step for step, _ in ours] == [step for step, _ in ref] == [0.0, 1.0, 2.0, 3.0]
    for (_, a), (_, b) in zip(ours, ref):
        assert_close(a, b, what="carry seen by the callback")


def test_unordered_io_callback_runs_once_per_execution(devices):
    device, _ = devices
    count = []
    f = jax.jit(lambda x: io_callback(lambda a: count.append(1) or np.asarray(a),
                                      jax.ShapeDtypeStruct((3,), jnp.float32), x))
    x = jax.device_put(np.arange(3, dtype=np.float32), device)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x)), np.arange(3))
    assert len(count) == 3


def test_debug_print_prints_what_xla_cpu_prints(devices, capsys):
    def f(x):
        jax.debug.print("first {a} and {b}", a=x[0], b=x[1:], ordered=True)
        y = jnp.cumsum(x)
        jax.debug.print("then {}", y, ordered=True)
        jax.debug.print("unordered {s:.3f}", s=jnp.sum(y))
        return y * 2

    printed = []
    outputs = []
    for device in devices:
        capsys.readouterr()
        outputs.append(np.asarray(jax.jit(f)(jax.device_put(_data(5, (4,)), device))))
        jax.effects_barrier()
        printed.append(capsys.readouterr().out)
    assert_close(outputs[0], outputs[1], what="result")
    ours, ref = printed
    assert ours == ref, (ours, ref)
    assert ours.index("first") < ours.index("then")


def test_debug_callback_in_cond_and_while_matches_xla_cpu(devices):
    seen = {d.platform: [] for d in devices}

    def f(x):
        def body(state):
            i, v = state
            jax.lax.cond(i % 2 == 0,
                         lambda: jax.debug.callback(lambda a, b: seen[current].append(
                             (int(a), np.asarray(b).copy())), i, v),
                         lambda: None)
            return i + 1, v * 1.5
        return jax.lax.while_loop(lambda s: s[0] < 5, body, (0, x))[1]

    outputs = []
    for device in devices:
        current = device.platform
        outputs.append(np.asarray(jax.jit(f)(jax.device_put(_data(6, (2,)), device))))
        jax.effects_barrier()
    assert_close(outputs[0], outputs[1], what="while result")
    ours, ref = (seen[d.platform] for d in devices)
    assert [i for i, _ in ours] == [i for i, _ in ref] == [0, 2, 4]
    for (_, a), (_, b) in zip(ours, ref):
        assert_close(a, b, what="value seen by jax.debug.callback")


def test_a_raising_callback_fails_that_execution_naming_the_callback(devices):
    device, _ = devices
    calls = []

    def my_failing_callback(a):
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("deliberately broken")
        return np.asarray(a)

    f = jax.jit(lambda x: jax.pure_callback(my_failing_callback,
                                            jax.ShapeDtypeStruct((2,), jnp.float32), x) + 1)
    x = jax.device_put(np.ones(2, np.float32), device)
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match=r"INTERNAL: .*my_failing_callback.*ValueError: deliberately broken"):
        np.asarray(f(x))
    # The process and the executable live on: the next execution succeeds.
    np.testing.assert_array_equal(np.asarray(f(x)), [2.0, 2.0])


def test_sys_exit_in_a_callback_on_the_worker_thread_fails_only_that_execution(devices):
    device, _ = devices

    def exits(a):
        sys.exit(3)

    def f(x):
        y = x @ x.T  # big enough to run on the client's worker thread
        return jax.pure_callback(exits, jax.ShapeDtypeStruct(y.shape, y.dtype), y)

    x = jax.device_put(_data(8, (1200, 8)), device)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"exits.*SystemExit"):
        np.asarray(jax.jit(f)(x))
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: v[:2, 0] * 0)(x)), [0.0, 0.0])


def test_a_callback_returning_the_wrong_shape_is_an_error_naming_it(devices):
    device, _ = devices

    def wrong_shape(a):
        return np.zeros((3,), np.float32)

    f = jax.jit(lambda x: jax.pure_callback(wrong_shape, jax.ShapeDtypeStruct((2,), jnp.float32), x))
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"wrong_shape.*\[2\]"):
        np.asarray(f(jax.device_put(np.ones(2, np.float32), device)))


@pytest.mark.parametrize("size", [4, 1200], ids=["inline", "worker-thread"])
def test_a_callback_may_run_jax_on_the_same_device(devices, size):
    """The callback runs on the execute thread (the caller's, or the client's worker for a
    bigger program) and itself executes a program on pjrtkit_cpu: no deadlock."""
    device, reference = devices

    def reenter(a):
        on_device = jax.device_put(np.asarray(a), device)
        return np.asarray(jnp.tanh(on_device) + 1)

    def f(x):
        y = x @ x.T  # at 1200x1200 the program is too big to run inline
        return jax.pure_callback(reenter, jax.ShapeDtypeStruct(y.shape, y.dtype), y)

    x = _data(7, (size, 8)) / 4
    ours = np.asarray(jax.jit(f)(jax.device_put(x, device)))
    ref = np.asarray(jax.jit(f)(jax.device_put(x, reference)))
    assert_close(ours, ref, what="re-entrant callback result")


def test_a_callback_entry_lives_as_long_as_its_program(devices):
    device, _ = devices
    gc.collect()
    before = callbacks.live_count()

    def scaled(a):
        return np.asarray(a) * 2

    f = jax.jit(lambda x: jax.pure_callback(scaled, jax.ShapeDtypeStruct((2,), jnp.float32), x))
    x = jax.device_put(np.ones(2, np.float32), device)
    np.testing.assert_array_equal(np.asarray(f(x)), [2.0, 2.0])
    gc.collect()
    assert callbacks.live_count() == before + 1
    np.testing.assert_array_equal(np.asarray(f(x)), [2.0, 2.0])  # still callable
    del f
    jax.clear_caches()
    gc.collect()
    assert callbacks.live_count() == before


def test_a_key_that_is_gone_or_from_another_process_is_refused():
    entry = callbacks.register(lambda: (), "probe")
    key = entry.key
    assert callbacks.lookup(key) is entry
    del entry
    gc.collect()
    with pytest.raises(FailedPrecondition, match="no longer exists"):
        callbacks.lookup(key)
    foreign = "0" * 12 + ":0"
    if key.startswith("0" * 12):
        foreign = "1" * 12 + ":0"
    with pytest.raises(FailedPrecondition, match="another process"):
        callbacks.lookup(foreign)


def test_every_callback_primitive_of_this_jax_has_a_rule():
    from pjrtkit import jax_callbacks

    names = sorted(p.name for p in jax_callbacks.callback_lowerings("pjrtkit_cpu", "cpu"))
    assert names == ["buffer_callback", "check", "debug_callback", "debug_print", "io_callback",
                     "pure_callback"]
    # buffer callbacks get device buffers and a stream on JAX's gpu, none on tpu: only a
    # platform like cpu, whose buffers are host arrays, gets the rule.
    for like in ("tpu", "cuda", None):
        assert "buffer_callback" not in {
            p.name for p in jax_callbacks.callback_lowerings("pjrtkit_x", like)}


def test_without_the_cpu_platform_callbacks_get_arrays_on_the_pjrtkit_device(run_python):
    """With JAX_PLATFORMS=pjrtkit_cpu alone (no JAX cpu device to place arguments on, which JAX's
    own GPU/TPU backends require) pjrtkit_cpu, being like cpu, hosts the callback's arrays
    itself; what is printed and returned is what XLA's cpu gives for the same program."""
    # One source for both runs: prints, an ordered io_callback and a pure_callback that reports
    # where its argument lives.
    program = """
            import jax, jax.numpy as jnp, numpy as np
            from jax.experimental import io_callback
            def where(a):
                print("callback argument on", next(iter(a.devices())).platform)
                return np.asarray(a) * 2
            def f(x):
                jax.debug.print("x={x} sum={s}", x=x, s=jnp.sum(x), ordered=True)
                y = io_callback(lambda a: np.asarray(a) + 1,
                                jax.ShapeDtypeStruct((3,), jnp.float32), x, ordered=True)
                return jax.pure_callback(where, jax.ShapeDtypeStruct((3,), jnp.float32), y)
            out = jax.jit(f)(jnp.arange(3.0))
            jax.effects_barrier()
            print("result", np.asarray(out).tolist())
    """
    ours = run_python(program, JAX_PLATFORMS="pjrtkit_cpu")
    assert ours.returncode == 0, ours.stderr
    ref = run_python(program, JAX_PLATFORMS="cpu")
    assert ref.returncode == 0, ref.stderr
    assert ours.stdout.replace("pjrtkit_cpu", "cpu") == ref.stdout
    assert "callback argument on pjrtkit_cpu" in ours.stdout


def test_a_callback_in_a_partially_manual_shard_map_is_refused_as_on_cpu(run_python):
    """Callbacks over several devices run (tests/jax/test_many_devices.py); where JAX refuses
    one on its cpu (a shard_map manual over only some mesh axes), it is refused alike."""
    program = """
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import NamedSharding, PartitionSpec as P
        mesh = jax.make_mesh((2, 1), ("x", "y"))
        x = jax.device_put(jnp.arange(4.0), NamedSharding(mesh, P("x")))
        body = lambda a: jax.pure_callback(np.sin, jax.ShapeDtypeStruct(a.shape, a.dtype), a)
        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                  axis_names={"x"}))
        try:
            f(x)
        except NotImplementedError as exc:
            print("error:", exc)
        print("alive", float(jnp.sum(jnp.ones(3))))
    """
    ours = run_python(program, JAX_PLATFORMS="pjrtkit_cpu", PJRTKIT_CPU_DEVICES="2")
    xla = run_python(program, JAX_PLATFORMS="cpu",
                     XLA_FLAGS="--xla_force_host_platform_device_count=2")
    assert ours.returncode == 0 and xla.returncode == 0, ours.stderr + xla.stderr
    assert ours.stdout == xla.stdout
    assert ours.stdout.startswith("error: callbacks are only supported in spmd computations")
    assert ours.stdout.splitlines()[-1] == "alive 3.0"


def test_checkify_check_under_jit_is_refused_at_lowering_as_on_xla_cpu(devices):
    from jax.experimental import checkify

    def f(x):
        checkify.check(jnp.all(x > 0), "x must be positive")
        return x * 2

    for device in devices:
        with pytest.raises(ValueError, match="Cannot abstractly evaluate a checkify.check"):
            jax.jit(f)(jax.device_put(np.ones(3, np.float32), device))


def test_checkify_debug_check_is_a_no_op_under_jit_as_on_xla_cpu(devices):
    from jax.experimental import checkify

    def f(x):
        checkify.debug_check(jnp.all(x < 0), "{x} is not negative", x=x)
        return x + 1

    ours, theirs = _on_both(devices, f, _data(3))
    assert_close(ours[0], theirs[0], what="debug_check under jit")


def test_checkify_check_with_runtime_errors_raises_at_execution_as_on_xla_cpu(devices):
    from jax.experimental import checkify

    def f(x):
        checkify.check(jnp.all(x > 0), "x must be positive, got {x}", x=x)
        return x * 2

    jax.config.update("jax_experimental_unsafe_xla_runtime_errors", True)
    try:
        ours, theirs = _on_both(devices, f, np.ones(3, np.float32))
        assert_close(ours[0], theirs[0], what="a check that holds")
        for device in devices:
            with pytest.raises(Exception, match="x must be positive, got"):
                np.asarray(jax.jit(f)(jax.device_put(-np.ones(3, np.float32), device)))
    finally:
        jax.config.update("jax_experimental_unsafe_xla_runtime_errors", False)
        from jax._src import dispatch  # the failed runtime tokens would raise again at exit

        dispatch.runtime_tokens.clear()


def test_a_token_output_is_a_token_buffer_with_no_host_value_as_on_xla_cpu(devices):
    # An executable's !stablehlo.token output is PJRT_Buffer_Type_TOKEN (XLA's answer), so
    # jaxlib refuses a host copy with its own message; a uint8 token made it fail inside the
    # plugin's copy instead. The token still flows through a program and orders its effects.
    messages = []
    for device in devices:
        with jax.default_device(device):
            token = jax.lax.create_token()
            with pytest.raises(Exception) as raised:
                token._buf._value  # noqa: B018 - the read is the test
            messages.append(str(raised.value))
            arr, out = jax.jit(lambda a, t: (a + 1, t))(jnp.ones(3), token)
            assert type(out) is type(token) and out is not token  # a Token, not an array
            np.testing.assert_array_equal(np.asarray(arr), np.full(3, 2.0))
    assert messages[0] == messages[1]
    assert "Cannot convert a token-shape buffer to a numpy array." in messages[0]


def test_buffer_callback_fills_results_in_place_as_on_xla_cpu(devices):
    from jax.experimental import buffer_callback

    seen = {d.platform: [] for d in devices}

    def callback(ctx, out, pair, *, scale):
        assert ctx.stage == buffer_callback.ExecutionStage.EXECUTE
        x, y = pair
        seen[current].append((x.writeable, out[0].writeable, x.shape, str(x.dtype)))
        np.asarray(out[0])[...] = np.asarray(x) * np.asarray(scale) + np.from_dlpack(y)
        np.asarray(out[1])[...] = np.asarray(x).sum(axis=0)

    x, y, scale = _data(5), _data(6), np.float32(0.5)
    fun = buffer_callback.buffer_callback(
        callback, (jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((3,), x.dtype)))
    row = buffer_callback.buffer_callback(  # vmapped: one call per row
        lambda ctx, out, a: np.copyto(np.asarray(out), np.asarray(a)[::-1]),
        jax.ShapeDtypeStruct((3,), x.dtype), vmap_method="sequential")
    outputs = []
    for device in devices:
        current = device.platform
        a, b, s = (jax.device_put(v, device) for v in (x, y, scale))
        results = jax.jit(lambda a, b, s: (*fun((a, b), scale=s), jax.vmap(row)(a)))(a, b, s)
        assert all(r.devices() == {device} for r in results)
        outputs.append([np.asarray(r) for r in results])
    for ours, xla in zip(*outputs):
        np.testing.assert_array_equal(ours, xla)
    np.testing.assert_allclose(outputs[0][0], x * scale + y, rtol=1e-6)
    np.testing.assert_array_equal(outputs[0][2], x[:, ::-1])
    assert seen[devices[0].platform] == seen[devices[1].platform] == [
        (False, True, (4, 3), "float32")]


def test_buffer_callback_aliases_a_result_to_its_argument_and_reports_errors(devices):
    from jax.experimental import buffer_callback

    def add_one_in_place(ctx, out, arg):
        assert np.asarray(arg).ctypes.data == np.asarray(out).ctypes.data  # one buffer
        np.asarray(out)[...] += 1

    fun = buffer_callback.buffer_callback(add_one_in_place, jax.ShapeDtypeStruct((4, 3),
                                          np.float32), input_output_aliases={0: 0})
    data = _data(7)
    for device in devices:
        x = jax.device_put(data, device)
        np.testing.assert_array_equal(np.asarray(jax.jit(fun)(x)), data + 1)
        np.testing.assert_array_equal(np.asarray(x), data)  # the caller's array is unchanged

    def returns(ctx, out, arg):
        return 1

    def raises(ctx, out, arg):
        raise KeyError("no such row")

    x = jax.device_put(data, devices[0])
    for bad, message in ((returns, "must not return any values"), (raises, "no such row")):
        failing = buffer_callback.buffer_callback(bad, jax.ShapeDtypeStruct((4, 3), np.float32))
        with pytest.raises(jax.errors.JaxRuntimeError, match=message) as raised:
            jax.block_until_ready(jax.jit(failing)(x))
        assert "INTERNAL" in str(raised.value) and "buffer_callback" in str(raised.value)
    # The process lives on; the next execution succeeds (and is JAX's last runtime token).
    np.testing.assert_array_equal(np.asarray(jax.jit(fun)(x)), data + 1)


def test_a_buffer_callback_buffer_follows_numpy_array_protocol():
    # NumPy's __array__ protocol: the buffer itself when nothing changes (writes land in it),
    # a copy when asked or converted, and ValueError for a conversion under copy=False.
    from pjrtkit.jax_callbacks import HostBuffer

    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    buffer = HostBuffer(data)
    assert np.asarray(buffer) is data and buffer.writeable and buffer.shape == (2, 3)
    assert np.array(buffer, copy=True) is not data
    assert np.asarray(buffer, dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError, match="copy=False"):
        np.asarray(buffer, dtype=np.float64, copy=False)
