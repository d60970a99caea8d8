"""TPU numerics on pjrtkit_tpu (measured in a child process, numerics_cases.py): float32 dot
and convolution at DEFAULT (one bf16 pass), HIGH (bf16x3) and HIGHEST (bf16x6) agree with XLA's
CPU backend computing the same passes explicitly, and are as far from float64 as each scheme
is; non-float32 contractions are the cpu's; float64 and complex128 fail at compile time naming
op and type, 64-bit integers run (libtpu compiles them); ``lax.platform_dependent`` takes
the tpu branch. Plus the rewrite itself, on real
programs, without JAX's backends."""
from __future__ import annotations

import numpy as np
import pytest
from jax import lax
from tpu_children import HERE, report_of, require_libtpu, start
from vector_unit_cases import CASES, case_name, dot_of, shapes

from pjrtkit.errors import Unimplemented
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.testing.programs import lower_program
from pjrtkit_tpu.precision import on_vector_unit, passes_of, with_tpu_precision

# float32 accumulation of bf16 products: the emulation and ours sum the same exact products in
# different orders, so they agree to a few float32 ulps of the result's scale.
SAME_PASSES = 2e-6

# One xdist worker runs this module (make test passes `--dist loadgroup`): its module fixtures
# start child interpreters, and each worker given some of its tests would start them all again.
pytestmark = pytest.mark.xdist_group("test_tpu_numerics")


@pytest.fixture(scope="module")
def report():
    return report_of(start([str(HERE / "numerics_cases.py")]))


@pytest.mark.parametrize("op", ["dot", "conv"])
@pytest.mark.parametrize("precision", ["None", "HIGH", "HIGHEST"])
def test_contractions_are_the_tpu_passes(report, op, precision):
    measured = report[f"{op}/{precision}"]
    assert measured["vs_emulated"] < SAME_PASSES, measured


@pytest.mark.parametrize("op", ["dot", "conv"])
def test_each_precision_is_as_accurate_as_its_passes(report, op):
    default, high, highest = (report[f"{op}/{p}"]["vs_exact"] for p in ("None", "HIGH", "HIGHEST"))
    f32 = report[f"{op}/HIGHEST"]["xla_f32_vs_exact"]
    assert 1e-4 < default < 3e-2, default       # bfloat16's 8 bits
    assert 5e-7 < high < 1e-4 and high < default / 50, high   # about 16 bits
    assert highest < 2 * f32 + 1e-7, (highest, f32)           # float32's


def test_bfloat16_contractions_are_the_cpus(report):
    assert report["bf16_dot_equal"]


@pytest.mark.parametrize("label, op, dtype", [
    ("float64 add", "stablehlo.broadcast_in_dim", "float64"),
    ("complex128 exp", "stablehlo.real", "complex128"),
])
def test_float64_and_complex128_fail_at_compile_time_naming_op_and_type(report, label, op, dtype):
    message = report["refusals"][label]
    assert message.startswith("UNIMPLEMENTED"), message
    assert f"{op} on {dtype} is not supported" in message, message


def test_platform_dependent_takes_the_tpu_branch(report):
    chosen = report["platform_dependent"]
    assert chosen["with_tpu"] == [6.0, 6.0], chosen
    assert chosen["without_tpu"] == [2.0, 2.0], chosen
    assert "not found for platform pjrtkit_tpu" in chosen["no_default"], chosen


def test_64_bit_integers_run_exactly_as_libtpu_compiles_them(report):
    assert report["int64 exact"] and report["uint64 exact"]


def test_random_runs_though_it_makes_uint64_iotas_with_x64_off(report):
    assert report["random_normal_equal"]


def _contractions(program):
    return [op for op in walk_ops(program)
            if op.name in ("stablehlo.dot_general", "stablehlo.convolution")]


@pytest.mark.parametrize("precision, expected", [(None, 1), (lax.Precision.HIGH, 3),
                                                  (lax.Precision.HIGHEST, 6)])
def test_the_rewrite_makes_one_contraction_per_pass(precision, expected):
    a, b = np.ones((4, 8), np.float32), np.ones((8, 3), np.float32)
    program = lower_program(lambda x, y: lax.dot(x, y, precision=precision), a, b)
    (original,) = _contractions(program)
    assert passes_of(original) == expected
    rewritten = with_tpu_precision(program)
    assert len(_contractions(rewritten)) == expected
    assert len(_contractions(program)) == 1  # the loaded program is shared: never changed


def test_mixed_operand_precisions_take_the_higher():
    a, b = np.ones((4, 8), np.float32), np.ones((8, 3), np.float32)
    program = lower_program(lambda x, y: lax.dot(
        x, y, precision=(lax.Precision.DEFAULT, lax.Precision.HIGH)), a, b)
    assert passes_of(_contractions(program)[0]) == 3


def test_an_algorithm_a_tpu_lacks_is_unimplemented():
    import dataclasses

    from pjrtkit.stablehlo.attributes import OpaqueAttribute

    a, b = np.ones((4, 8), np.float32), np.ones((8, 3), np.float32)
    (dot,) = _contractions(lower_program(lambda x, y: lax.dot(x, y), a, b))
    # XLA's CPU lowering refuses TF32 itself, so the op is given the attribute JAX writes.
    tf32 = OpaqueAttribute(text="#stablehlo.dot_algorithm<lhs_precision_type = tf32, "
                                "rhs_precision_type = tf32, accumulation_type = f32, "
                                "lhs_component_count = 1, rhs_component_count = 1, "
                                "num_primitive_operations = 1, allow_imprecise_accumulation = false>")
    with pytest.raises(Unimplemented, match="dot algorithm"):
        passes_of(dataclasses.replace(dot, attributes={**dot.attributes, "algorithm": tf32}))


def test_float32_by_bfloat16_is_a_tpu_pass_too():
    """jax.nn.dot_product_attention's mix (a dot_general of float32 by bfloat16 with a bf16
    algorithm): a bfloat16 operand is exact in one piece."""
    import dataclasses

    import ml_dtypes

    from pjrtkit.stablehlo.ir import TensorType, Value
    from pjrtkit_tpu.precision import tpu_contraction

    a, b = np.ones((4, 8), np.float32), np.ones((8, 3), np.float32)
    program = lower_program(lambda x, y: lax.dot(x, y, precision=lax.Precision.HIGH), a, b)
    (dot,) = _contractions(program)
    narrow = Value(dot.operands[1].id, TensorType((8, 3), np.dtype(ml_dtypes.bfloat16)))
    mixed = dataclasses.replace(dot, operands=(dot.operands[0], narrow))
    assert passes_of(mixed) == 3
    # hi*hi and lo*hi: the bfloat16 operand has no low piece.
    assert sum(op.name == "stablehlo.dot_general" for op in tpu_contraction(mixed, 3)) == 2


def test_an_operand_two_contractions_share_is_rounded_once():
    """A weight's forward and backward dots (``x @ w``, and ``g`` contracted with ``w``'s
    second dimension, as JAX's transpose rule writes it) read one rounding of ``w`` per
    piece: the 8-device step rounded its (512, 512) weight twice on every device. The results
    are those of rounding it at each dot (XLA's TPU's numbers)."""
    from pjrtkit_tpu.precision import with_tpu_precision

    rng = np.random.default_rng(3)
    x, g = (rng.standard_normal((16, 64)).astype(np.float32) for _ in range(2))
    w = rng.standard_normal((64, 64)).astype(np.float32)

    def f(x, g, w):
        backward = lax.dot_general(g, w, (((1,), (1,)), ((), ())))
        return x @ w, backward, lax.dot(x, w, precision=lax.Precision.HIGH)

    program = with_tpu_precision(lower_program(f, x, g, w))
    ops = [op for function in program.functions.values() for block in function.body.blocks
           for op in block.ops]
    rounded = [op.operands[0] for op in ops if op.name == "stablehlo.reduce_precision"]
    # DEFAULT: x, g and w once each (w for both dots); HIGH (two pieces): x, x - hi(x), w,
    # w - hi(w): x and w are rounded again there, as the first piece of another count.
    assert len(rounded) == 3 + 4, [str(v) for v in rounded]
    assert len({id(v) for v in rounded}) == 5
    # Against the rounding done by hand: bf16(x) @ bf16(w), bf16(g) @ bf16(w).T.
    import ml_dtypes

    def bf(a):
        return a.astype(ml_dtypes.bfloat16).astype(np.float32)

    from pjrtkit.lowering.plan import build_plan
    from pjrtkit.reference import REFERENCE

    forward, backward, _ = build_plan(program, REFERENCE)(x, g, w)
    np.testing.assert_allclose(forward, bf(x) @ bf(w), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(backward, bf(g) @ bf(w).T, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def libtpu_vector_unit():
    require_libtpu()
    return report_of(start([str(HERE / "vector_unit_cases.py")], JAX_PLATFORMS="cpu"))


@pytest.mark.parametrize("batch, lhs, rhs", CASES, ids=[case_name(*c) for c in CASES])
def test_dots_on_the_vector_unit_are_libtpus(libtpu_vector_unit, batch, lhs, rhs):
    """A float32 dot stays float32 (no bf16 pass) exactly when libtpu compiles it as multiply
    and reduce rather than on the matrix unit."""
    args = [np.ones(s, np.float32) for s in shapes(batch, lhs, rhs)]
    program = lower_program(dot_of(batch), *args)
    (dot,) = _contractions(program)
    assert on_vector_unit(dot) == libtpu_vector_unit[case_name(batch, lhs, rhs)]
    rewritten = _contractions(with_tpu_precision(program))
    assert len(rewritten) == 1 and (rewritten[0].operands == dot.operands) == on_vector_unit(dot)


def test_the_cpu_rules_for_primitives_tpus_lack_are_left_out():
    """QR with column pivoting and the pivoted tridiagonal solve are JAX's CPU/GPU lowerings
    only; pjrtkit_tpu takes the cpu plugin's other JAX rules (eigh, svd, lu, ...)."""
    from pjrtkit_cpu.plugin import pjrtkit_jax_lowering_rules as cpu_rules
    from pjrtkit_tpu.plugin import pjrtkit_jax_lowering_rules as tpu_rules

    cpu = {rule.primitive.name for rule in cpu_rules()}
    tpu = {rule.primitive.name for rule in tpu_rules()}
    assert cpu - tpu == {"geqp3", "tridiagonal_solve"}
    assert {"eigh", "svd", "lu"} <= tpu
