"""Native while loops (``pjrtkit_cpu.loops.native``) against XLA's CPU backend.

Every test plans a real program with the cpu rules and runs it twice: once before the
background compile finishes (the interpreted loop) and once with the native loop, comparing
both with XLA and checking that the native loop really ran (``STATS``). Programs JAX cannot
emit (out-of-range dynamic_slice starts) are StableHLO text run on XLA's CPU client.
"""
import inspect
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo.loader import load_program
from pjrtkit.testing.programs import lower_program, run_on_xla_cpu
from pjrtkit.testing.tolerances import assert_close

from pjrtkit_cpu.fusion import cache, maybe_fuse
from pjrtkit_cpu.loops import native


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    # One cache directory for the session's tests, never the user's.
    monkeypatch.setenv("PJRTKIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "pjrtkit"))


def _run_both(plan, flat, ref, native_expected, loosen=1.0, whole=False):
    before = dict(native.STATS)
    with np.errstate(all="ignore"):
        first = plan(*flat)
        cache.wait_all(timeout=300)
        compiled = dict(native.STATS)
        second = plan(*flat)
    if whole:  # the program's one outer loop ran as one native call, nothing interpreted
        assert (native.STATS["native"] - compiled["native"],
                native.STATS["interpreted"] - compiled["interpreted"]) == (1, 0)
    for outs in (first, second):
        assert len(outs) == len(ref)
        for i, (a, b) in enumerate(zip(outs, ref)):
            assert_close(np.asarray(a), np.asarray(b), what=f"output {i}", loosen=loosen)
    ran = native.STATS["native"] > before["native"]
    assert ran == native_expected, f"native loop ran: {ran}, expected {native_expected}"
    return second


@pytest.fixture
def check_native(registry):
    """check_native(fn, *args, native=True): interpreted and native loop vs XLA."""

    def run(fn, *args, native=True, loosen=1.0, whole=False):
        plan = build_plan(maybe_fuse(lower_program(fn, *args)), registry)
        flat = [np.asarray(x) for x in jax.tree_util.tree_leaves(args)]
        return _run_both(plan, flat, run_on_xla_cpu(fn, args), native, loosen, whole)

    return run


@pytest.fixture
def check_native_mlir(registry):
    from jax._src import xla_bridge
    from jax._src.lib import xla_client

    def run(text, *args, native=True):
        backend = xla_bridge.get_backend("cpu")
        device = backend.devices()[0]
        executable = backend.compile_and_load(text, xla_client.DeviceList((device,)),
                                              xla_client.CompileOptions())
        ref = [np.asarray(r) for r in
               executable.execute([jax.device_put(a, device) for a in args])]
        plan = build_plan(load_program(text), registry)
        return _run_both(plan, list(args), ref, native)

    return run


# -- the benchmark shapes -----------------------------------------------------------------------
def test_fori_loop(check_native):
    x = np.linspace(-1, 1, 128, dtype=np.float32)
    check_native(lambda x: lax.fori_loop(
        0, 100, lambda i, x: x * 0.999 + i.astype(jnp.float32) * 1e-6, x), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scan_rnn(check_native, rng, dtype):
    steps, batch, hidden = 12, 3, 8
    xs = rng.standard_normal((steps, batch, hidden)).astype(dtype)
    w = (rng.standard_normal((hidden, hidden)) / 3).astype(dtype)
    u = (rng.standard_normal((hidden, hidden)) / 3).astype(dtype)
    h0 = rng.standard_normal((batch, hidden)).astype(dtype)

    def fn(h0, xs, w, u):
        return lax.scan(lambda h, x: (jnp.tanh(h @ w + x @ u),) * 2, h0, xs)

    # 12 dependent steps of tanh approximations and reassociated sums (XLA's Eigen dots and
    # tanh differ from ours by an ulp or two per step), so a few ulps more than one op.
    check_native(fn, h0, xs, w, u, loosen=4)


def test_caller_buffers_unchanged(registry, rng):
    xs = rng.standard_normal((6, 4)).astype(np.float32)
    ys = rng.standard_normal((6, 4)).astype(np.float32)

    def fn(xs, ys):
        def step(i, c):
            xs, ys = c
            row = lax.dynamic_index_in_dim(xs, i, keepdims=False)
            return xs, lax.dynamic_update_index_in_dim(ys, row * 2, i, 0)
        return lax.fori_loop(0, 6, step, (xs, ys))

    plan = build_plan(lower_program(fn, xs, ys), registry)
    saved = xs.copy(), ys.copy()
    _run_both(plan, [xs, ys], run_on_xla_cpu(fn, (xs, ys)), True)
    np.testing.assert_array_equal(xs, saved[0])
    np.testing.assert_array_equal(ys, saved[1])


# -- XLA's semantics inside native loops --------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.uint32, np.int64])
def test_integer_wraparound_division_and_shifts(check_native, rng, dtype):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, 16, dtype=dtype, endpoint=True)
    d = rng.integers(-3 if info.min < 0 else 0, 3, 16).astype(dtype)  # includes 0 and -1

    def fn(x, d):
        def body(i, c):
            x, acc = c
            x = x * dtype(3) + dtype(7)          # wraps in the declared width
            q = lax.div(x, d)                     # x/0 and MIN/-1 as XLA defines them
            r = lax.rem(x, d)
            s = lax.shift_right_arithmetic(x, i.astype(dtype) * dtype(3))
            return x, acc ^ q ^ r ^ s
        return lax.fori_loop(0, 5, body, (x, jnp.zeros_like(x)))

    check_native(fn, x, d)


def test_nan_max_min_and_saturating_converts(check_native):
    x = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, 3e9, -3e9, 1.5, -1.5, 2.5], np.float32)

    def fn(x):
        def body(i, c):
            x, ints, m = c
            m = jnp.maximum(m, x) + jnp.minimum(x, 0.0) + lax.clamp(np.float32(-1), x, m)
            clamped = lax.clamp(np.int32(-5), x.astype(jnp.int32), i.astype(jnp.int32))
            return x * 1.5, ints + clamped, m
        return lax.fori_loop(0, 4, body, (x, jnp.zeros(x.shape, jnp.int32), jnp.zeros_like(x)))

    check_native(fn, x)


def test_tanh_special_values(check_native):
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-30, -1e-6, 0.3, -0.7, 1.0, 4.5,
                  -8.9, 9.5, 30.0, -1e4, 2e-3], np.float32)

    def fn(x):
        return lax.fori_loop(0, 2, lambda i, c: (jnp.tanh(c[0]), c[1] + jnp.tanh(c[0] * 3)),
                             (x, jnp.zeros_like(x)))

    check_native(fn, x)


def test_data_dependent_while(check_native):
    def collatz_steps(n):
        def body(c):
            n, steps = c
            return jnp.where(n % 2 == 0, n // 2, 3 * n + 1), steps + 1
        return lax.while_loop(lambda c: c[0] != 1, body, (n, np.int64(0)))

    for n in (1, 27):
        check_native(collatz_steps, np.int64(n))


def test_zero_trip_loop(check_native, rng):
    x = rng.standard_normal(5).astype(np.float32)
    check_native(lambda x, n: lax.fori_loop(0, n, lambda i, c: c * 2 + 1, x), x, np.int32(0))


@pytest.mark.parametrize("dims", [
    (((1,), (1,)), ((), ())),        # rhs contracted on its last dim (no transpose)
    (((0,), (0,)), ((), ())),        # both operands contracted on the first dim
    (((2,), (1,)), ((0,), (0,))),    # batched
])
def test_dot_layouts(check_native, rng, dims):
    (lc, rc), (lb, rb) = dims
    lhs = rng.standard_normal((3, 4, 5)[:2 + bool(lb)] if lb else (4, 5)).astype(np.float32)
    if lb:
        rhs = rng.standard_normal((3, 5, 6)).astype(np.float32)
    elif rc == (1,):
        rhs = rng.standard_normal((6, 5)).astype(np.float32)
    else:
        lhs = rng.standard_normal((5, 4)).astype(np.float32)
        rhs = rng.standard_normal((5, 6)).astype(np.float32)

    def fn(lhs, rhs):
        def body(i, acc):
            d = lax.dot_general(lhs, rhs, ((lc, rc), (lb, rb)))
            return acc * 0.5 + d
        shape = jax.eval_shape(lambda: lax.dot_general(lhs, rhs, ((lc, rc), (lb, rb)))).shape
        return lax.fori_loop(0, 3, body, jnp.zeros(shape, jnp.float32))

    check_native(fn, lhs, rhs)


# (m, n): the helper writes a 2-row x 4-column block loop and loops for the rows and columns
# left over, each only when it has iterations: no 2-row block, no 4-column block, a row left
# over only, both blocks exactly, every loop.
@pytest.mark.parametrize("m,n", [(1, 3), (3, 8), (2, 4), (3, 5)])
def test_dot_blocks_and_remainders(check_native, rng, m, n):
    lhs = rng.standard_normal((m, 5)).astype(np.float32)
    rhs = rng.standard_normal((5, n)).astype(np.float32)
    check_native(lambda a, b: lax.fori_loop(0, 3, lambda i, acc: acc * 0.5 + a @ b,
                                            jnp.zeros((m, n), jnp.float32)), lhs, rhs)


def test_a_call_running_interpreted_goes_on_natively_when_the_compile_lands(registry, rng):
    # A long loop whose native loop lands while a call runs interpreted (a cold start: the
    # compile takes seconds, numpyro's NUTS loop runs for a minute) switches to it mid-call and
    # gives the bits of an all-native call. The loop carries an array it updates in place (a
    # carry the interpreted loop owns) and one it only reads.
    steps = 20000

    def fn(x, table, history):
        def body(i, carry):
            x, history = carry
            x = x * 0.999 + table[i % 16] * 1e-3
            return x, history.at[i % 64].set(x[i % 8])
        return lax.fori_loop(0, steps, body, (x, history))

    args = (rng.standard_normal(8).astype(np.float32),
            rng.standard_normal((16, 8)).astype(np.float32), np.zeros(64, np.float32))
    plan = build_plan(maybe_fuse(lower_program(fn, *args)), registry)
    loops = [kernel for kernel in (inspect.unwrap(step[0]) for step in plan.steps)
             if isinstance(kernel, native.NativeLoopKernel)]
    assert len(loops) == 1
    loop = loops[0]
    cache.wait_all(timeout=300)
    assert loop.ready
    all_native = plan(*args)
    compiled, loop._fast = loop._fast, None  # as before its compile landed  # noqa: SLF001

    def land():  # the compile lands some hundred iterations into the call
        time.sleep(0.02)
        loop._fast = compiled  # noqa: SLF001

    before = dict(native.STATS)
    lands = threading.Thread(target=land)
    lands.start()
    switched = plan(*args)
    lands.join()
    assert {k: native.STATS[k] - before[k] for k in before} == \
        {"interpreted": 1, "resumed": 1, "native": 1}
    for a, b, r in zip(switched, all_native, run_on_xla_cpu(fn, args)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert_close(np.asarray(a), np.asarray(r))


def test_unsupported_op_stays_interpreted(check_native, rng):
    x = rng.standard_normal(8).astype(np.float32)
    # sort has no native emitter: the loop must silently stay interpreted and still be right
    check_native(lambda x: lax.fori_loop(0, 3, lambda i, c: jnp.sort(c * -1.0), x), x,
                 native=False)


# Start indices outside the operand: XLA clamps them so the slice / update stays inside.
CLAMPED_STARTS = """
func.func public @main(%x: tensor<5x4xf32>, %s: tensor<T>, %u: tensor<T>) -> (tensor<5x4xf32>, tensor<f32>) {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %acc0 = stablehlo.constant dense<0.0> : tensor<f32>
  %r:3 = stablehlo.while(%a = %x, %i = %zero, %acc = %acc0) : tensor<5x4xf32>, tensor<i32>, tensor<f32>
    cond {
      %n = stablehlo.constant dense<3> : tensor<i32>
      %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %it = stablehlo.convert %i : (tensor<i32>) -> tensor<T>
      %big = stablehlo.multiply %s, %it : tensor<T>
      %sl = stablehlo.dynamic_slice %a, %big, %u, sizes = [2, 3] : (tensor<5x4xf32>, tensor<T>, tensor<T>) -> tensor<2x3xf32>
      %two = stablehlo.constant dense<2.0> : tensor<2x3xf32>
      %upd = stablehlo.add %sl, %two : tensor<2x3xf32>
      %neg = stablehlo.negate %big : tensor<T>
      %w = stablehlo.dynamic_update_slice %a, %upd, %neg, %u : (tensor<5x4xf32>, tensor<2x3xf32>, tensor<T>, tensor<T>) -> tensor<5x4xf32>
      %e = stablehlo.reshape %upd : (tensor<2x3xf32>) -> tensor<6xf32>
      %e0 = stablehlo.dynamic_slice %e, %zero, sizes = [1] : (tensor<6xf32>, tensor<i32>) -> tensor<1xf32>
      %f = stablehlo.reshape %e0 : (tensor<1xf32>) -> tensor<f32>
      %acc2 = stablehlo.add %acc, %f : tensor<f32>
      %one = stablehlo.constant dense<1> : tensor<i32>
      %j = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %w, %j, %acc2 : tensor<5x4xf32>, tensor<i32>, tensor<f32>
    }
  return %r#0, %r#2 : tensor<5x4xf32>, tensor<f32>
}
"""


@pytest.mark.parametrize("dtype, start, column", [
    (np.int32, 0, 0), (np.int32, 2, 1), (np.int32, -7, 3), (np.int32, 100, -5),
    (np.int64, 2**40, 2), (np.uint32, 1, 1), (np.uint32, 3, 4000000000),
    (np.uint64, 2, 2**63 + 5)])
def test_dynamic_slice_and_update_clamp_starts(check_native_mlir, rng, dtype, start, column):
    x = rng.standard_normal((5, 4)).astype(np.float32)
    mlir_type = {"int32": "i32", "int64": "i64", "uint32": "ui32", "uint64": "ui64"}
    text = CLAMPED_STARTS.replace("tensor<T>", f"tensor<{mlir_type[np.dtype(dtype).name]}>")
    check_native_mlir(text, x, dtype(start), dtype(column))


def test_power_iteration_with_reductions(check_native, rng):
    m = rng.standard_normal((6, 6)).astype(np.float32)
    m = m @ m.T  # symmetric: a dominant real eigenvalue

    def fn(m):
        def cond(c):
            v, i, delta = c
            return (delta > 1e-6) & (i < 50)

        def body(c):
            v, i, _ = c
            w = m @ v
            w = w / jnp.sqrt(jnp.sum(w * w))
            return w, i + 1, jnp.max(jnp.abs(w - v))

        return lax.while_loop(cond, body, (jnp.ones(6, jnp.float32) / 6, 0, jnp.float32(1)))

    # 50 dependent normalisations: reassociated sums differ from XLA's by an ulp per step
    check_native(fn, m, loosen=10)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_slices_transposes_iota_and_reductions(check_native, rng, dtype):
    x = (rng.standard_normal((4, 3)) * 4).astype(dtype)
    if dtype == np.float32:
        x[1, 2] = np.nan

    def fn(x):
        def body(i, c):
            acc, red = c
            t = x.T                                     # transpose (hoisted: x is invariant)
            part = t[1:3, ::2]                          # static slice with a stride
            ids = lax.iota(np.int32, 3)
            if dtype == np.bool_:
                r = jnp.any(x, axis=0) ^ jnp.all(x, axis=1)[:3]
                return acc ^ (ids > i), red ^ r
            r = jnp.max(x, axis=0) + jnp.min(t, axis=0)[:3].astype(x.dtype) + part.sum(1)[0]
            return acc + ids, red + r.astype(x.dtype)
        init = (jnp.zeros(3, jnp.bool_ if dtype == np.bool_ else jnp.int32),
                jnp.zeros(3, x.dtype))
        return lax.fori_loop(0, 3, body, init)

    check_native(fn, x)


@pytest.mark.parametrize("unroll", [1, 2, 4])
def test_unrolled_scan_with_concatenate(check_native, rng, unroll):
    xs = rng.standard_normal((8, 2, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3)).astype(np.float32) / 2

    def fn(xs, w):
        def step(h, x):
            h = jnp.tanh(h @ w + x)
            return h, jnp.concatenate([h, -h], axis=1)
        return lax.scan(step, jnp.zeros((2, 3), jnp.float32), xs, unroll=unroll)

    check_native(fn, xs, w, loosen=4)  # 8 dependent tanh/dot steps (see test_scan_rnn)


NATIVE_DTYPES = [np.bool_, np.int8, np.int32, np.uint16, np.uint64, np.float32, np.float64]


@pytest.mark.parametrize("dtype", NATIVE_DTYPES + [np.float16],
                         ids=[np.dtype(d).name for d in NATIVE_DTYPES + [np.float16]])
def test_carries_of_every_dtype(check_native, rng, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        x = rng.integers(0, 2, (3, 2)).astype(dtype)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, (3, 2), dtype=dtype, endpoint=True)
    else:
        x = rng.standard_normal((3, 2)).astype(dtype)

    def f(x, n):
        # rolls the carry (slice + concatenate) and keeps a running count (bool: a toggle),
        # exact in every dtype
        step = (lambda c: ~c) if dtype.kind == "b" else (lambda c: c + dtype.type(1))
        return lax.fori_loop(0, n, lambda i, c: (jnp.roll(c[0], 1, axis=0), step(c[1])),
                             (x, jnp.zeros((), dtype)))

    # float16 arithmetic rounds through float32 per op in XLA: not native (interpreted, exact)
    check_native(f, x, np.int32(5), native=dtype != np.float16)


def test_cond_and_switch_inside_the_loop(check_native, rng):
    x = rng.standard_normal((2, 3)).astype(np.float32)

    def fn(x):
        def body(i, c):
            x, k = c
            # an array branch result that is the carry itself, a splat, or computed
            y = lax.cond(i % 3 == 0, lambda: x, lambda: x * 0.5 + 1.0)
            z = lax.switch(i - 2, [lambda: jnp.zeros_like(x), lambda: y.T.reshape(2, 3),
                                   lambda: -y], )
            return y + z, lax.cond(k > 3, lambda: k - 1, lambda: k + 2)
        return lax.fori_loop(0, 7, body, (x, np.int32(0)))

    check_native(fn, x)


# -- fused groups inside loop bodies ------------------------------------------------------------
def _fused_bodies(fn, *args):
    from pjrtkit.stablehlo.ir import walk_ops

    from pjrtkit_cpu.fusion import FUSED_OP

    program = maybe_fuse(lower_program(fn, *args))
    return program, [op for op in walk_ops(program) if op.name == FUSED_OP]


@pytest.mark.parametrize("case", ["splats", "broadcast_capture", "transpose", "reduction"])
def test_fused_groups_in_the_body_compile_natively(registry, rng, monkeypatch, case):
    """With fusion on, a loop over a carry big enough to fuse (fusion rewrites its body into
    fused groups) still compiles natively: each group is one loop over its elements."""
    import pjrtkit_cpu.fusion as fusion

    monkeypatch.setattr(fusion, "ENABLED", True)
    shape = (128, 128) if case == "transpose" else (64, 512)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(shape[-1:]).astype(np.float32)

    def body(i, c):
        step = i.astype(jnp.float32) * 1e-3
        if case == "splats":
            return c * 0.999 + jnp.tanh(c) * 1e-3 + step
        if case == "broadcast_capture":
            return c * 0.9 + jnp.tanh(w + step) * 0.1  # (contracting: errors do not grow)
        if case == "transpose":
            return c * 0.5 + c.T * 0.25 + step
        return c - jnp.max(c, axis=-1, keepdims=True) * 0.5 + step

    def fn(x, w):
        return lax.fori_loop(0, 50, body, x)

    program, fused = _fused_bodies(fn, x, w)
    assert fused, "fusion made no group in the loop body"
    _run_both(build_plan(program, registry), [x, w], run_on_xla_cpu(fn, (x, w)), True)


def _loop_sources(monkeypatch):
    sources = []
    original = native.LoopSpec.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        sources.append(self.source)

    monkeypatch.setattr(native.LoopSpec, "__init__", recording)
    return sources


def test_an_elementwise_chain_in_the_body_is_one_pass_over_the_carry(check_native, monkeypatch):
    """``x * 0.999 + i * 1e-6``: the multiply's result is read once, by the add, so the add's
    loop computes it (one pass, no buffer for it); the carry is then copied back once."""
    sources = _loop_sources(monkeypatch)
    x = np.linspace(-1, 1, 128, dtype=np.float32)
    check_native(lambda x: lax.fori_loop(
        0, 100, lambda i, x: x * 0.999 + i.astype(jnp.float32) * 1e-6, x), x)
    (source,) = sources
    assert source.count("for q in range(128):") == 2, source  # the chain, the carry copy
    assert source.count("np.empty(128") == 1, source


def test_an_elementwise_loop_calling_libm_is_not_merged_with_its_neighbours(check_native,
                                                                            monkeypatch):
    """Consecutive elementwise loops of one size are one loop, except one whose body calls
    libm per element (float32 sine): LLVM would not vectorize the rest of a merged loop."""
    sources = _loop_sources(monkeypatch)
    x = np.linspace(-1, 1, 128, dtype=np.float32)

    def body(i, x):
        s = jnp.sin(x)  # read twice: stored by a loop of its own
        t = x * 0.5 + 1.0  # read twice: stored
        return s * s + t * t

    check_native(lambda x: lax.fori_loop(0, 20, body, x), x)
    (source,) = sources
    kernel = source[source.index("def kernel"):]
    loops = kernel.split("for q in range(128):")[1:]
    assert len(loops) == 3, kernel  # sin; t then s * s + t * t (merged); the carry's copy
    assert "np.sin(" in loops[0] and "np.sin(" not in "".join(loops[1:]), kernel


def test_values_read_twice_or_across_an_in_place_update_are_not_chained(check_native, rng,
                                                                        monkeypatch):
    """A value read by two ops is stored once (both read the buffer); an elementwise value of
    a scan step read after the in-place update of the stacked output still sees its operands
    as they were (and matches XLA either way)."""
    sources = _loop_sources(monkeypatch)
    xs = rng.standard_normal((5, 16)).astype(np.float32)
    h0 = rng.standard_normal(16).astype(np.float32)

    def step(h, x):
        a = h * 0.5 + x
        return jnp.tanh(a) + a * a, a * 2.0

    check_native(lambda h0, xs: lax.scan(step, h0, xs), h0, xs)
    (source,) = sources
    # Three computations, each ending in a buffer: ``a`` (its multiply chained into its add;
    # read by tanh, a * a and a * 2, so stored), ``tanh(a) + a * a`` (one chain) and ``a * 2``,
    # written one after another, so one loop (LoopSource.element_loop); then the in-place
    # update of the stacked output and the carry's copy, each a loop of its own.
    assert source.count("for q in range(16):") == 2, source
    assert source.count("np.empty(16") == 3, source


@pytest.mark.parametrize("dtype", [np.float32, np.bool_])
def test_a_scalar_carry_computed_in_a_one_element_buffer(check_native, rng, dtype):
    # The rank-0 carry comes out of a dot of two vectors (a one-element buffer in the native
    # loop): Numba refused "Cannot unify bool and array(bool, 1d, C)" (numpyro's NUTS tree
    # building) and the loop stayed interpreted.
    v = rng.standard_normal(10).astype(np.float32)

    def fn(v):
        def cond(carry):
            i, _x, _flag = carry
            return i < 5

        def body(carry):
            i, x, flag = carry
            s = jnp.dot(x, x) * 0.5
            new_flag = (s > 1.0) if dtype is np.bool_ else s
            return i + 1, x * 0.9, new_flag.astype(dtype)

        return lax.while_loop(cond, body, (0, v, jnp.zeros((), dtype)))

    check_native(fn, v)


# -- what numpyro's NUTS runs in its loops: inner loops, scatters, random bits, calls in branches
def test_an_inner_loop_with_a_data_dependent_trip_count(check_native, rng):
    x = rng.standard_normal(6).astype(np.float32)

    def fn(x):
        def body(i, c):
            v, total = c
            # an inner while whose trip count depends on the carry, with an array carry, a
            # scalar carry and a value from the outer body it reads
            scale = (i + 1).astype(jnp.float32)

            def inner_cond(s):
                k, w = s
                return (k < 4) & (jnp.sum(jnp.abs(w)) < 50.0)

            def inner_body(s):
                k, w = s
                return k + 1, w * 1.5 + scale

            k, w = lax.while_loop(inner_cond, inner_body, (np.int32(0), v))
            # an inner loop that never runs returns its initial values
            z = lax.while_loop(lambda s: s[0] < 0, lambda s: (s[0] + 1, s[1] * 2.0),
                               (np.int32(0), w))[1]
            return z * 0.1, total + k
        return lax.fori_loop(0, 5, body, (x, np.int32(0)))

    check_native(fn, x, whole=True)


@pytest.mark.parametrize("case", ["set_row", "add_repeated", "max_out_of_bounds", "multiply"])
def test_scatters_in_the_body(check_native, rng, case):
    m = rng.standard_normal((5, 4)).astype(np.float32)
    u = rng.standard_normal((3, 4)).astype(np.float32)

    def step(i, m):
        if case == "set_row":  # numpyro's mass-matrix update: a row at a dynamic index
            return m.at[i % 5].set(m[(i + 1) % 5] * 0.5)
        if case == "add_repeated":  # the same row twice: both updates add
            return m.at[jnp.array([1, 3, 1])].add(u * 0.1)
        if case == "max_out_of_bounds":  # index 7 is outside: its window is dropped
            return m.at[jnp.array([0, 7, i % 5])].max(u)
        return m.at[jnp.array([2, i % 5, 4])].multiply(u * 0.01 + 1.0)

    check_native(lambda m: lax.fori_loop(0, 4, step, m), m, whole=True)


@pytest.mark.long  # Numba compiles one loop holding threefry and a normal sampler: 25-30 s
def test_random_bits_and_calls_inside_branches(check_native, rng):
    # threefry (shifts, bitcasts from uint32 to float32) in a called function inside a cond
    # branch inside the loop: the calls in branches are inlined, the bitcasts emitted natively
    x = rng.standard_normal(4).astype(np.float32)

    def fn(x, key):
        def body(i, c):
            v, k = c
            k, sub = jax.random.split(k)
            noise = lax.cond(i % 2 == 0, lambda: jax.random.normal(sub, (4,), jnp.float32),
                             lambda: jax.random.uniform(sub, (4,), jnp.float32))
            return v * 0.5 + noise, k
        return lax.fori_loop(0, 6, body, (x, key))

    check_native(fn, x, jax.random.key_data(jax.random.key(3)), whole=True)


def test_a_branch_returning_a_rank0_value_held_in_a_buffer(check_native, rng):
    # a dot of two vectors is a one-element buffer in the native loop; a cond returning it
    # assigned the buffer to the branch's scalar home (Numba: "Cannot unify float32 and
    # array(float32, 1d, C)", numpyro's NUTS)
    v = rng.standard_normal(8).astype(np.float32)

    def fn(v):
        def body(i, c):
            x, s = c
            t = lax.cond(s > 0.0, lambda: jnp.dot(x, x), lambda: jnp.sum(x))
            return x * 0.9, t * 0.01 + s
        return lax.fori_loop(0, 5, body, (v, np.float32(1.0)))

    check_native(fn, v, whole=True)


def test_a_reduction_of_a_broadcast_scalar(check_native):
    def fn(c):
        return lax.fori_loop(0, 3, lambda i, c: jnp.sum(jnp.broadcast_to(c, (7,))) * 0.25, c)

    check_native(fn, np.float32(0.3), whole=True)


@pytest.mark.parametrize("shape,axes", [((8,), (0,)), ((10,), (0,)), ((6, 20), (1,)),
                                        ((4, 5, 6), (0, 2))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_body_s_float_sums_give_the_native_loop_s_bits(registry, rng, shape, axes, dtype):
    # The interpreted body (before the native loop lands) adds in the native loop's order
    # (lowering.loop_sums): NumPy's pairwise reduce gave other bits from eight elements on.
    x = rng.standard_normal(shape).astype(dtype)

    def fn(x):
        return lax.fori_loop(0, 3, lambda i, v: v - jnp.sum(v * v, axis=axes, keepdims=True)
                             * dtype(0.01), x)

    plan = build_plan(maybe_fuse(lower_program(fn, x)), registry)
    before = native.STATS["native"]
    with np.errstate(all="ignore"):
        first = np.asarray(plan(x)[0])
        cache.wait_all(timeout=300)
        second = np.asarray(plan(x)[0])
    assert native.STATS["native"] > before
    assert first.tobytes() == second.tobytes()
    assert_close(second, np.asarray(run_on_xla_cpu(fn, (x,))[0]))
