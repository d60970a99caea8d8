"""Constants of fused groups are kernel arguments (issue 13): programs that differ only in a
splat constant share one compiled kernel, and give the same bits as kernels with the constant
written into their source.

Real JAX programs, fused and planned with the cpu rules, against XLA's CPU backend (through
``check_fused``) and against the same program's kernel built with every constant as a literal.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pjrtkit import fp_state
from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.testing.programs import lower_program

from pjrtkit_cpu.fusion import FUSED_OP, cache, fuse_program, kernel, rows
from pjrtkit_cpu.fusion.kernel import STATS

from fusion_support import COLS, ROWS, layernorm, normal

pytestmark = pytest.mark.usefixtures("private_fusion_cache")

FLOATS = [np.float32, np.float64]
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def _compiles_started() -> int:
    return cache.cache_sizes()["fused_compiles_started"]


def _operand(rng, dtype):
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, (ROWS, COLS)).astype(bool)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, (ROWS, COLS), dtype=dtype, endpoint=True)
    return normal(rng, ROWS, COLS, dtype=dtype) * 3


def _program(dtype, k):
    """A fusable chain reading the splat constant ``k`` (of ``dtype``) twice."""
    if np.dtype(dtype) == np.bool_:
        return lambda a: (a ^ jnp.bool_(k)) | (a & jnp.bool_(k))
    c = np.asarray(k, dtype)
    if np.issubdtype(dtype, np.integer):
        return lambda a: (a * c + c) ^ a
    return lambda a: jnp.maximum(a * c + 1, c) - a


_CONSTANTS = {np.dtype(np.bool_): (True, False)}
_CONSTANTS.update((np.dtype(d), (2.5, -7.25)) for d in FLOATS)
_CONSTANTS.update((np.dtype(d), (3, np.iinfo(d).max)) for d in INTS)


@pytest.mark.parametrize("dtype", [*FLOATS, *INTS, np.bool_])
def test_programs_differing_in_a_constant_share_one_kernel(check_fused, rng, dtype):
    x = _operand(rng, dtype)
    first, second = _CONSTANTS[np.dtype(dtype)]
    check_fused(_program(dtype, first), x)
    started = _compiles_started()
    out_first = check_fused(_program(dtype, first), x)
    out_second = check_fused(_program(dtype, second), x)  # XLA's answer with the new constant
    assert _compiles_started() == started, "a new constant compiled a new kernel"
    assert not all(np.array_equal(a, b) for a, b in zip(out_first, out_second))


def test_layernorm_epsilons_share_one_kernel(check_fused, rng):
    x, g, b = (normal(rng, ROWS, COLS), normal(rng, COLS), normal(rng, COLS))

    def with_epsilon(eps):
        def fn(x, g, b):
            m = x.mean(-1, keepdims=True)
            v = ((x - m) ** 2).mean(-1, keepdims=True)
            return (x - m) * jax.lax.rsqrt(v + eps) * g + b
        return fn

    check_fused(with_epsilon(1e-5), x, g, b, inside={"reduce"})
    started = _compiles_started()
    check_fused(with_epsilon(1e-3), x, g, b, inside={"reduce"})
    check_fused(layernorm, x, g, b, inside={"reduce"})  # 1e-5 again
    assert _compiles_started() == started


def _all_literals(op):
    return list(op.attributes.get("literals", ()))


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) if a.dtype == np.bool_ else a.view(f"u{a.dtype.itemsize}")


def _loops(program):
    """The fused loops a run of ``program`` calls: fused groups and row programs (the groups
    inside a row program are its stages, not loops of their own)."""
    def walk(region):
        for block in region.blocks:
            for op in block.ops:
                if op.name in (FUSED_OP, rows.ROWS_OP):
                    yield op
                else:
                    for inner in op.regions:
                        yield from walk(inner)

    return [op for f in program.functions.values() for op in walk(f.body)]


def _same_bits_as_literal_kernel(registry, monkeypatch, fn, *args):
    """Runs ``fn`` through its fused kernels twice: constants as arguments (the plugin's
    kernels) and every constant a literal of the source; both must have run fused and agree
    bit for bit. Returns the outputs."""
    program = fuse_program(lower_program(fn, *args))
    fused = [op for op in walk_ops(program) if op.name == FUSED_OP]
    assert fused and any(op.attributes["literals"] for op in fused), "no constant was fused"
    sources = {kernel.kernel_source(op) for op in fused}
    # the loops a run calls: fused groups, and row programs (which hold groups)
    loops = _loops(program)
    as_arguments = build_plan(program, registry)
    with monkeypatch.context() as patch:
        patch.setattr(kernel, "baked_literals", _all_literals)
        assert sources.isdisjoint(kernel.kernel_source(op) for op in fused)
        as_literals = build_plan(program, registry)
    flat = [np.asarray(a) for a in args]
    with np.errstate(all="ignore"):
        as_arguments(*flat), as_literals(*flat)
        cache.wait_all(timeout=120)
        before = STATS["fused"]
        ours = as_arguments(*flat)
        theirs = as_literals(*flat)
    assert STATS["fused"] == before + 2 * len(loops), "a fused loop did not run"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and np.array_equal(_bits(a), _bits(b)), f"output {i}"
    return ours


SPECIAL_FLOATS = [np.nan, np.inf, -np.inf, -0.0, 0.0, 5e-324, 1e-45, 1e30]


# make test runs each constant in one of the two dtypes (float64's smallest subnormal in float64,
# float32's in float32); make test-long, which CI runs, the other half
@pytest.mark.parametrize("k, dtype", [
    pytest.param(k, dtype, marks=() if dtype is FLOATS[i % 2] else pytest.mark.long)
    for i, k in enumerate(SPECIAL_FLOATS) for dtype in FLOATS])
def test_special_float_constants_give_the_literal_kernels_bits(registry, monkeypatch, rng,
                                                               check_fused, dtype, k):
    x = normal(rng, ROWS, COLS, dtype=dtype)
    x[0, :4] = [0.0, -0.0, np.inf, np.nan]
    c = np.asarray(k, dtype)

    def fn(a):
        return (a * c + a / c, jnp.maximum(a, c), jnp.minimum(a - c, a), (a + c) == c)

    _same_bits_as_literal_kernel(registry, monkeypatch, fn, x)
    if c == 0 or not np.isfinite(c) or abs(c) >= np.finfo(dtype).tiny:
        check_fused(fn, x)  # (XLA's CPU backend flushes subnormals to zero; NumPy does not)


_TRIVIAL_KERNEL = """from numba import njit


@njit(nogil=True)
def kernel(out):
    out[0] = 1.0
"""


@pytest.mark.skipif(not fp_state.can_set_flush_subnormals(),
                    reason="sets x86's FTZ/DAZ bits (x86-64 Linux only)")
@pytest.mark.parametrize("dtype", FLOATS)
def test_a_compile_thread_started_by_a_flushing_thread_keeps_subnormal_literals(
        registry, monkeypatch, rng, tmp_path, dtype):
    # A CI run once saw the literal 5e-324 read as 0 (test_special_float_constants...): the
    # compile thread had inherited flushing from the thread that started it, and Python's
    # float parser flushes too. Here a flushing thread starts a fresh compile thread.
    monkeypatch.setenv("PJRTKIT_CACHE_DIR", str(tmp_path))  # compiled, not loaded from disk
    monkeypatch.setattr(cache, "_executor", None)
    monkeypatch.setattr(cache, "_futures", type(cache._futures)())  # noqa: SLF001
    with fp_state.default_environment():  # (the thread's state before, afterwards)
        fp_state.set_flush_subnormals(True)
        started = cache.compile_async(_TRIVIAL_KERNEL, [(np.dtype(np.float64), 1, False)])
    started.result(timeout=120)
    x = normal(rng, ROWS, COLS, dtype=dtype)
    x[0, :4] = [0.0, -0.0, np.inf, np.nan]
    c = np.asarray(np.finfo(dtype).smallest_subnormal, dtype)

    def fn(a):
        return a * c + a / c, (a + c) == c

    with fp_state.default_environment():  # the runs keep subnormals, whatever the thread's
        ours = _same_bits_as_literal_kernel(registry, monkeypatch, fn, x)
    assert not np.isnan(np.asarray(ours[0])[0, :3]).any(), "the constant was read as zero"


# the narrowest and both 64-bit integers in make test (one Numba compile each); the other widths
# in make test-long, which CI runs
@pytest.mark.parametrize("dtype", [
    pytest.param(d, marks=() if d in (np.int8, np.int64, np.uint64) else pytest.mark.long)
    for d in INTS])
def test_integer_extremes_give_the_literal_kernels_bits(registry, monkeypatch, rng,
                                                        check_fused, dtype):
    info = np.iinfo(dtype)
    x = _operand(rng, dtype)
    low, high = np.asarray(info.min, dtype), np.asarray(info.max, dtype)
    bits = 8 * np.dtype(dtype).itemsize
    shift = np.asarray(bits - 3, dtype)

    def fn(a):
        return (a * high + low, jax.lax.shift_left(a, shift) ^ jax.lax.shift_right_logical(a, shift),
                jnp.maximum(a, low + 1) - jnp.minimum(a, high), (a > low) & (a < high))

    _same_bits_as_literal_kernel(registry, monkeypatch, fn, x)
    check_fused(fn, x)


@pytest.mark.parametrize("dtype", [np.int32, np.uint64, np.int8])
def test_an_integer_divisor_stays_a_literal(check_fused, rng, dtype):
    x = _operand(rng, dtype)
    seven, three = np.asarray(7, dtype), np.asarray(3, dtype)

    def fn(a):
        return jax.lax.div(a, seven) + jax.lax.rem(a, seven) * three

    out = check_fused(fn, x)
    program = fuse_program(lower_program(fn, x))
    (op,) = [op for op in walk_ops(program) if op.name == FUSED_OP]
    values = dict(op.attributes["literals"])
    baked = dict(kernel.baked_literals(op))
    assert [int(v) for v in baked.values()] == [7], (values, baked)  # 3 is an argument
    assert len(values) == 2
    assert f"np.{np.dtype(dtype).name}(7)" in kernel.kernel_source(op)
    assert out  # (check_fused compared it with XLA)
