"""Elementwise fusion: real JAX programs, fused into Numba loops, against XLA's CPU backend.

Every test lowers a JAX function, fuses it (``fuse_program``), plans it with the cpu rules and
runs it twice: once before the background compile finishes (the unfused fallback) and once with
the fused loop, comparing both with XLA. Shapes are at least ``MIN_ELEMENTS`` so groups fuse.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.testing.programs import lower_program, run_on_xla_cpu
from pjrtkit.testing.tolerances import assert_close

from pjrtkit_cpu.fusion import FUSED_OP, cache, fuse_program
from pjrtkit_cpu.fusion.groups import MIN_ELEMENTS
from pjrtkit_cpu.fusion.kernel import STATS

ROWS, COLS = 64, 512  # 32k elements: above MIN_ELEMENTS
assert ROWS * COLS >= MIN_ELEMENTS


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    # One cache directory for the session's tests, never the user's.
    monkeypatch.setenv("PJRTKIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "pjrtkit"))


@pytest.fixture
def check_fused(registry):
    """check_fused(fn, *args, fused=True, inside=()): fuse, plan, run unfused and fused, compare
    to XLA. ``inside``: op names (without "stablehlo.") that must end up in fused loops."""

    def run(fn, *args, fused=True, loosen=1.0, inside=()):
        program = fuse_program(lower_program(fn, *args))
        count = sum(op.name == FUSED_OP for op in walk_ops(program))
        assert (count > 0) == fused, f"expected fused={fused}, found {count} fused ops"
        in_loops = {inner.name.removeprefix("stablehlo.") for op in walk_ops(program)
                    if op.name == FUSED_OP for inner in op.regions[0].entry.ops}
        assert set(inside) <= in_loops, f"not fused: {set(inside) - in_loops}"
        plan = build_plan(program, registry)
        flat = [np.asarray(x) for x in jax.tree_util.tree_leaves(args)]
        ref = run_on_xla_cpu(fn, args)
        before = dict(STATS)
        with np.errstate(all="ignore"):
            first = plan(*flat)
            cache.wait_all(timeout=120)
            second = plan(*flat)
        failed = [f for f in list(cache._futures.values()) if f.done() and f.exception()]  # noqa: SLF001
        assert not failed, f"a fused loop failed to compile: {failed[0].exception()!r}"
        for outs in (first, second):
            assert len(outs) == len(ref)
            for i, (a, b) in enumerate(zip(outs, ref)):
                assert_close(np.asarray(a), b, what=f"output {i}", loosen=loosen)
        if fused:
            assert STATS["fused"] > before["fused"], "the fused loop never ran"
        return second

    return run


def _normal(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# -- floats ---------------------------------------------------------------------------------

def layernorm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layernorm(check_fused, rng, dtype):
    x = _normal(rng, ROWS, COLS, dtype=dtype) * 3 + 1
    check_fused(layernorm, x, _normal(rng, COLS, dtype=dtype), _normal(rng, COLS, dtype=dtype),
                inside={"reduce"})


def test_gelu_tanh_and_erf(check_fused, rng):
    x = _normal(rng, ROWS, COLS) * 4

    def fn(x):
        return jax.nn.gelu(x, approximate=True), jax.nn.gelu(x, approximate=False)

    check_fused(fn, x, inside={"tanh"})


def test_softmax_and_logistic(check_fused, rng):
    x = _normal(rng, ROWS, COLS) * 10
    check_fused(lambda x: (jax.nn.softmax(x, axis=-1), jax.nn.sigmoid(x) * x), x,
                inside={"exponential", "reduce"})


def test_sgd_update(check_fused, rng):
    params = {"w": _normal(rng, ROWS, COLS), "b": _normal(rng, COLS * 32)}
    grads = {"w": _normal(rng, ROWS, COLS), "b": _normal(rng, COLS * 32)}

    def sgd(p, g, lr):
        return jax.tree_util.tree_map(lambda a, b: a - lr * b * 0.5 + 1e-4 * a, p, g)

    check_fused(sgd, params, grads, np.float32(0.1))


def test_nan_inf_maximum_minimum_signed_zeros(check_fused, rng):
    x = _normal(rng, ROWS, COLS)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e38, -1e-30], np.float32)
    x.reshape(-1)[: 7 * 100] = np.tile(specials, 100)
    y = np.roll(x, 3)

    def fn(x, y):
        return (jnp.maximum(x, y) * 2, jnp.minimum(x, -y) + 0.0, jnp.sign(x) * jnp.abs(y),
                jnp.isfinite(x * y), jnp.round(x * 3.3), jnp.floor(x) - jnp.ceil(y),
                jnp.clip(x * 2, -1.0, 1.0), jnp.where(x > y, jnp.exp(x), jnp.log1p(jnp.abs(y))))

    check_fused(fn, x, y)


def test_mixed_scalar_and_broadcast_operands(check_fused, rng):
    x = _normal(rng, ROWS, COLS)
    col = _normal(rng, ROWS, 1)
    row = _normal(rng, COLS)

    def fn(x, col, row, s):
        return (x * s + col) / (jnp.abs(row) + 1.0) - jnp.float32(2) * s

    check_fused(fn, x, col, row, np.float32(1.5))


def test_float_to_int_conversion_saturates(check_fused, rng):
    x = _normal(rng, ROWS, COLS) * 3e9
    x.reshape(-1)[:4] = [np.nan, np.inf, -np.inf, -0.7]

    def fn(x):
        y = x * 1.0
        return (y.astype(jnp.int32), y.astype(jnp.uint32), y.astype(jnp.int8),
                (y * 2).astype(jnp.uint8), (y + 1).astype(jnp.int64))

    check_fused(fn, x)


# -- integers and bits ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint16, np.uint32, np.int64, np.uint64])
def test_integer_wraparound_and_shifts(check_fused, rng, dtype):
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (ROWS, COLS), dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, (ROWS, COLS), dtype=dtype, endpoint=True)
    bits = 8 * np.dtype(dtype).itemsize
    s = rng.integers(0, bits + 4, (ROWS, COLS)).astype(dtype)

    def fn(a, b, s):
        wide = a * b + a - b * 3
        shifted = (jax.lax.shift_left(a, s) ^ jax.lax.shift_right_logical(b, s)
                   | jax.lax.shift_right_arithmetic(a, s))
        return (wide, shifted, -a + ~b, jnp.maximum(a, b) - jnp.minimum(a, b),
                jax.lax.div(a, b | 1) + jax.lax.rem(a, b), jax.lax.div(a, s), jax.lax.rem(b, s),
                jnp.sign(a) * jnp.abs(b), (a > b) & (b != s), wide.astype(jnp.float32) * 2)

    check_fused(fn, a, b, s)


def test_threefry_bits_and_normal(check_fused):
    key = jax.random.key_data(jax.random.key(42))

    def fn(key):
        k = jax.random.wrap_key_data(key)
        return (jax.random.bits(k, (ROWS, COLS)), jax.random.normal(k, (ROWS, COLS), jnp.float32),
                jax.random.normal(k, (ROWS, COLS)))

    # erf_inv's log1p joins its polynomial; its coefficients (splat constants) are literals
    check_fused(fn, key, inside={"log_plus_one", "sqrt", "shift_left"})
    program = fuse_program(lower_program(fn, key))
    constants = {r.id: op for op in walk_ops(program) if op.name == "stablehlo.constant"
                 for r in op.results}
    fused = [op for op in walk_ops(program) if op.name == FUSED_OP]
    assert sum(len(op.attributes["literals"]) for op in fused) >= 10
    for op in fused:  # no constant array is read element by element
        assert not [v for v in op.operands if v.id in constants and v.type.shape]


def test_compare_select_chain(check_fused, rng):
    x = _normal(rng, ROWS, COLS)
    i = rng.integers(-5, 5, (ROWS, COLS)).astype(np.int32)

    def fn(x, i):
        cond = (x > 0) ^ (i < 0) | (x == x)
        return jnp.where(cond & (i != 2), x * i, -x), jnp.where(i > 0, i * 7, i - 1), ~cond

    check_fused(fn, x, i)


def test_inside_while_loop(check_fused, rng, monkeypatch):
    # (with native loops the whole loop is compiled, fused group included: test_loops_native;
    # here the interpreted loop runs the group's own fused kernel)
    from pjrtkit_cpu.loops import native

    monkeypatch.setattr(native, "ENABLED", False)
    x = _normal(rng, ROWS, COLS)

    def fn(x):
        def body(i, x):
            return jnp.tanh(x * 0.9 + 0.1) * 1.5 - i.astype(jnp.float32) * 0.01

        return jax.lax.fori_loop(0, 5, body, x)

    check_fused(fn, x, inside={"tanh"})


def test_small_programs_stay_unfused(check_fused, rng):
    x = _normal(rng, 8, 8)
    check_fused(lambda x: jnp.exp(x) * 2 + 1, x, fused=False)


def test_layernorm_sized_program_is_fused_through_the_plugin():
    """The real compile hook fuses a (4096, 1024) layernorm; after warm-up the loop runs."""
    if "pjrtkit_cpu" not in {d.platform for d in jax.devices("pjrtkit_cpu")}:
        pytest.skip("pjrtkit_cpu platform not available")
    x = np.random.default_rng(0).standard_normal((512, 1024), dtype=np.float32)
    g = np.ones(1024, np.float32)
    b = np.zeros(1024, np.float32)
    program = fuse_program(lower_program(layernorm, x, g, b))
    assert sum(op.name == FUSED_OP for op in walk_ops(program)) >= 2
    device = jax.devices("pjrtkit_cpu")[0]
    fn = jax.jit(layernorm)
    args = [jax.device_put(a, device) for a in (x, g, b)]
    fn(*args).block_until_ready()
    cache.wait_all(timeout=120)
    before = STATS["fused"]
    out = np.asarray(fn(*args))
    assert STATS["fused"] > before
    assert_close(out, run_on_xla_cpu(layernorm, (x, g, b))[0])


def test_fusion_can_be_disabled(monkeypatch, rng):
    import pjrtkit_cpu.fusion as fusion

    program = lower_program(lambda x: x * 2 + 1, _normal(rng, ROWS, COLS))
    assert fusion.maybe_fuse(program) is not program
    monkeypatch.setattr(fusion, "ENABLED", False)  # what PJRTKIT_CPU_FUSION=0 sets at import
    assert fusion.maybe_fuse(program) is program


def test_rank3_broadcasts_along_every_axis(check_fused, rng):
    x = _normal(rng, 8, 64, 64)
    a, b, c = _normal(rng, 8, 1, 1), _normal(rng, 1, 64, 1), _normal(rng, 64)
    v = _normal(rng, 8 * 64 * 64)

    def fn(x, a, b, c, v):
        return (x * a - b) * c + jnp.maximum(x, b), jnp.minimum(v * 2, v[:1]) - 1

    check_fused(fn, x, a, b, c, v)


def test_group_around_an_outside_reduce_is_reordered(check_fused, rng):
    """a feeds a reduce and, independently, more elementwise ops of its group; the group's
    last member sits after the reduce in the program, so the fused op must move before it, and
    the op that needs both starts a second group rather than closing a cycle."""
    x = _normal(rng, ROWS, COLS)

    def fn(x):
        a = x * 2 + 1
        r = jnp.sum(a, axis=1, keepdims=True)
        c = a * 3 - 1
        return (c + r) * 0.5 - a, c

    check_fused(fn, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8])
def test_clamp_fuses(check_fused, rng, dtype):
    """clamp(lo, x, hi) is one op of the group, with max/min's NaN and signed-zero rules."""
    if np.dtype(dtype).kind == "f":
        x = _normal(rng, ROWS, COLS, dtype=dtype) * 2
        x[0, :4] = [np.nan, -0.0, 0.0, np.inf]
        low, high = dtype(-1.0), dtype(0.5)
    else:
        x = rng.integers(0, 100, (ROWS, COLS)).astype(dtype)
        low, high = dtype(10), dtype(50)
    check_fused(lambda x: jax.lax.clamp(low, x * dtype(3), high) + dtype(1), x,
                inside={"clamp"})


def test_saturating_convert_to_uint64_matches_xla(check_fused, rng):
    # the largest uint64 is the bound a too-large float saturates to (one literal formatter)
    x = _normal(rng, ROWS, COLS) * np.float32(1e19)
    x[0, :3] = [np.inf, np.nan, -np.inf]
    check_fused(lambda x: (x * 2).astype(jnp.uint64), x)
