"""Elementwise fusion: real JAX programs, fused into Numba loops, against XLA's CPU backend.

Every test lowers a JAX function, fuses it (``fuse_program``), plans it with the cpu rules and
runs it twice: once before the background compile finishes (the unfused fallback) and once with
the fused loop, comparing both with XLA. Shapes are at least ``MIN_ELEMENTS`` so groups fuse.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.testing.programs import lower_program, run_on_xla_cpu
from pjrtkit.testing.tolerances import assert_close

from pjrtkit_cpu.fusion import FUSED_OP, cache, fuse_program
from pjrtkit_cpu.fusion.kernel import STATS

from fusion_support import COLS, ROWS, layernorm, normal

pytestmark = pytest.mark.usefixtures("private_fusion_cache")


# -- floats ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layernorm(check_fused, rng, dtype):
    x = normal(rng, ROWS, COLS, dtype=dtype) * 3 + 1
    check_fused(layernorm, x, normal(rng, COLS, dtype=dtype), normal(rng, COLS, dtype=dtype),
                inside={"reduce"})


def test_gelu_tanh_and_erf(check_fused, rng):
    x = normal(rng, ROWS, COLS) * 4

    def fn(x):
        return jax.nn.gelu(x, approximate=True), jax.nn.gelu(x, approximate=False)

    check_fused(fn, x, inside={"tanh"})


def test_softmax_and_logistic(check_fused, rng):
    x = normal(rng, ROWS, COLS) * 10
    check_fused(lambda x: (jax.nn.softmax(x, axis=-1), jax.nn.sigmoid(x) * x), x,
                inside={"exponential", "reduce"})


def test_sgd_update(check_fused, rng):
    params = {"w": normal(rng, ROWS, COLS), "b": normal(rng, COLS * 32)}
    grads = {"w": normal(rng, ROWS, COLS), "b": normal(rng, COLS * 32)}

    def sgd(p, g, lr):
        return jax.tree_util.tree_map(lambda a, b: a - lr * b * 0.5 + 1e-4 * a, p, g)

    check_fused(sgd, params, grads, np.float32(0.1))


def test_nan_inf_maximum_minimum_signed_zeros(check_fused, rng):
    x = normal(rng, ROWS, COLS)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e38, -1e-30], np.float32)
    x.reshape(-1)[: 7 * 100] = np.tile(specials, 100)
    y = np.roll(x, 3)

    def fn(x, y):
        return (jnp.maximum(x, y) * 2, jnp.minimum(x, -y) + 0.0, jnp.sign(x) * jnp.abs(y),
                jnp.isfinite(x * y), jnp.round(x * 3.3), jnp.floor(x) - jnp.ceil(y),
                jnp.clip(x * 2, -1.0, 1.0), jnp.where(x > y, jnp.exp(x), jnp.log1p(jnp.abs(y))))

    check_fused(fn, x, y)


def test_mixed_scalar_and_broadcast_operands(check_fused, rng):
    x = normal(rng, ROWS, COLS)
    col = normal(rng, ROWS, 1)
    row = normal(rng, COLS)

    def fn(x, col, row, s):
        return (x * s + col) / (jnp.abs(row) + 1.0) - jnp.float32(2) * s

    check_fused(fn, x, col, row, np.float32(1.5))


def test_float_to_int_conversion_saturates(check_fused, rng):
    x = normal(rng, ROWS, COLS) * 3e9
    x.reshape(-1)[:4] = [np.nan, np.inf, -np.inf, -0.7]

    def fn(x):
        y = x * 1.0
        return (y.astype(jnp.int32), y.astype(jnp.uint32), y.astype(jnp.int8),
                (y * 2).astype(jnp.uint8), (y + 1).astype(jnp.int64))

    check_fused(fn, x)


# -- integers and bits ----------------------------------------------------------------------

# int8, uint32 and int64 in make test (one Numba compile each, a few seconds); int32, uint16 and
# uint64 in make test-long, which CI runs
@pytest.mark.parametrize("dtype", [np.int8, pytest.param(np.int32, marks=pytest.mark.long),
                                   pytest.param(np.uint16, marks=pytest.mark.long), np.uint32,
                                   np.int64, pytest.param(np.uint64, marks=pytest.mark.long)])
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
    x = normal(rng, ROWS, COLS)
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
    x = normal(rng, ROWS, COLS)

    def fn(x):
        def body(i, x):
            return jnp.tanh(x * 0.9 + 0.1) * 1.5 - i.astype(jnp.float32) * 0.01

        return jax.lax.fori_loop(0, 5, body, x)

    check_fused(fn, x, inside={"tanh"})


def test_small_programs_stay_unfused(check_fused, rng):
    x = normal(rng, 8, 8)
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

    program = lower_program(lambda x: x * 2 + 1, normal(rng, ROWS, COLS))
    assert fusion.maybe_fuse(program) is not program
    monkeypatch.setattr(fusion, "ENABLED", False)  # what PJRTKIT_CPU_FUSION=0 sets at import
    assert fusion.maybe_fuse(program) is program


def test_rank3_broadcasts_along_every_axis(check_fused, rng):
    x = normal(rng, 8, 64, 64)
    a, b, c = normal(rng, 8, 1, 1), normal(rng, 1, 64, 1), normal(rng, 64)
    v = normal(rng, 8 * 64 * 64)

    def fn(x, a, b, c, v):
        return (x * a - b) * c + jnp.maximum(x, b), jnp.minimum(v * 2, v[:1]) - 1

    check_fused(fn, x, a, b, c, v)


def test_group_around_an_outside_reduce_is_reordered(check_fused, rng):
    """a feeds a reduce and, independently, more elementwise ops of its group; the group's
    last member sits after the reduce in the program, so the fused op must move before it, and
    the op that needs both starts a second group rather than closing a cycle."""
    x = normal(rng, ROWS, COLS)

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
        x = normal(rng, ROWS, COLS, dtype=dtype) * 2
        x[0, :4] = [np.nan, -0.0, 0.0, np.inf]
        low, high = dtype(-1.0), dtype(0.5)
    else:
        x = rng.integers(0, 100, (ROWS, COLS)).astype(dtype)
        low, high = dtype(10), dtype(50)
    check_fused(lambda x: jax.lax.clamp(low, x * dtype(3), high) + dtype(1), x,
                inside={"clamp"})


def test_saturating_convert_to_uint64_matches_xla(check_fused, rng):
    # the largest uint64 is the bound a too-large float saturates to (one literal formatter)
    x = normal(rng, ROWS, COLS) * np.float32(1e19)
    x[0, :3] = [np.inf, np.nan, -np.inf]
    check_fused(lambda x: (x * 2).astype(jnp.uint64), x)


def test_a_broadcast_several_groups_read_is_absorbed_by_each(check_fused, rng):
    # XLA's partitioner leaves one broadcast(0) for every relu and its gradient's select (the
    # per-device program of a data-parallel MLP step); a broadcast belongs to one group, so the
    # select, reading a dot of the forward group's output, was left a lone unfused op.
    x, b, w = normal(rng, ROWS, COLS), normal(rng, COLS), normal(rng, COLS, COLS) / 20

    def fn(x, b, w):
        zeros = jnp.zeros_like(x)  # one broadcast, read by maximum and select
        h = jnp.maximum(x + b, zeros)
        g = h @ w
        return jax.lax.select(h > 0, g, zeros)  # (jnp.where would be a called function)

    program = lower_program(fn, x, b, w)
    entry = program.functions[program.entry].body.blocks[0]
    shared = [op for op in entry.ops if op.name == "stablehlo.broadcast_in_dim"
              and not op.operands[0].type.shape
              and sum(op.results[0] in o.operands for o in entry.ops) == 2]
    assert len(shared) == 1, "the program no longer has the shared broadcast this is about"
    check_fused(fn, x, b, w, inside={"select", "maximum"})
    fused = fuse_program(program)
    top = [op.name for op in fused.functions[fused.entry].body.blocks[0].ops]
    assert "stablehlo.select" not in top and "stablehlo.maximum" not in top, top
