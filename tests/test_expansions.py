"""The expansions (``pjrtkit.expansions``): a backend declaring a primitive set gets what it lacks
rewritten into that set. The backend here is the NumPy reference restricted to a declared set
(its rules run the rewritten program), compared with XLA's CPU backend on real JAX programs."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from pjrtkit import expansions, hookimpl
from pjrtkit.backend import Backend
from pjrtkit.errors import Unimplemented
from pjrtkit.expansions.build import OpBuilder
from pjrtkit.lowering.plan import build_plan
from pjrtkit.semantics import dtypes as RD
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.testing.programs import lower_program, run_on_xla_cpu
from pjrtkit.testing.tolerances import assert_close

from expansion_support import RULES, replace_ops, run_expanded
from pjrtkit.types import Capabilities, CompileOptions, PrimitiveSet

OPTIONS = CompileOptions(num_replicas=1, num_partitions=1, device_assignment=None,
                         use_spmd_partitioning=False)
REAL_ONLY = frozenset(d.name for d in RD.ALL if d.kind != "c")


def primitives(dtypes=REAL_ONLY, ops=None) -> PrimitiveSet:
    return PrimitiveSet(ops=RULES.op_names if ops is None else ops, dtypes=dtypes,
                        custom_call_targets=RULES.custom_call_targets)


def assert_agrees(fn, *args, prims=None, loosen=1.0):
    program, ours = run_expanded(fn, args, prims or primitives())
    reference = run_on_xla_cpu(fn, args)
    assert len(ours) == len(reference)
    for i, (a, b) in enumerate(zip(ours, reference)):
        assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, b.dtype)
        assert_close(a, b, what=f"output {i}", loosen=loosen)
    return program


def cplx(rng, shape, dtype=np.complex64):
    return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)


# -- complex numbers onto pairs of reals ---------------------------------------------------------

def _lexicographic_sort(z):
    return jnp.sort(z, axis=0)


def _while(z):
    return lax.fori_loop(0, 3, lambda i, acc: acc * z + 1j, z)


def _cond(z, p):
    return lax.cond(p, lambda: z * 2, lambda: jnp.conj(z))


@jax.jit
def _called(z):
    return z * z - 1


COMPLEX_PROGRAMS = {
    "arithmetic": (lambda a, b: (a + b, a - b, a * b, a / b, -a), 2),
    "functions": (lambda a: (jnp.exp(a), jnp.sqrt(a), jnp.tanh(a), jnp.sin(a), jnp.cos(a),
                             jnp.expm1(a), jnp.log1p(a * 0.1), jnp.abs(a), jnp.sign(a),
                             lax.rsqrt(a), jax.nn.sigmoid(a), jnp.tan(a * 0.5)), 1),
    "parts": (lambda a: (jnp.real(a), jnp.imag(a), jnp.conj(a), lax.complex(jnp.imag(a),
                                                                             jnp.real(a))), 1),
    "compare": (lambda a, b: (a == b, a != b, a == a), 2),
    "power": (lambda a, b: a ** b, 2),
    "dot": (lambda a, b: (a @ b.T, jnp.einsum("ij,ij->i", a, b)), 2),
    "reductions": (lambda a: (jnp.sum(a, axis=0), jnp.cumsum(a, axis=1), jnp.prod(a, axis=1)),
                   1),
    "structure": (lambda a, b: (jnp.concatenate([a, b]), a.T, a[1:, ::-1],
                                jnp.pad(a, 1, constant_values=2 + 3j),
                                jnp.where(jnp.real(a) > 0, a, b), a.reshape(-1),
                                jnp.broadcast_to(a[0], (5, 4)), a[jnp.array([2, 0])]), 2),
    "conversions": (lambda a: (a.astype(jnp.complex128), jnp.real(a).astype(jnp.complex64),
                               lax.convert_element_type(a, jnp.float32),
                               lax.convert_element_type(a, jnp.int32),
                               lax.convert_element_type(a, bool)), 1),
    "constants": (lambda a: (a * (1 - 2j), a + jnp.array([1j, 2, 3 - 1j, 4j])), 1),
    "sort": (_lexicographic_sort, 1),
    "while": (_while, 1),
    "call": (lambda a: _called(a) + _called(2 * a), 1),
}


@pytest.mark.parametrize("name", sorted(COMPLEX_PROGRAMS))
def test_complex_programs_run_on_real_primitives(name):
    fn, arity = COMPLEX_PROGRAMS[name]
    rng = np.random.default_rng(len(name))
    args = [cplx(rng, (3, 4)) for _ in range(arity)]
    with jax.enable_x64(True):
        program = assert_agrees(fn, *args, loosen=4.0)
    # What is left of the complex values is how they arrive and leave: reinterpreted bytes.
    left = {op.name for op in walk_ops(program)
            if any(getattr(v.type, "dtype", None) is not None and v.type.dtype.kind == "c"
                   for v in (*op.operands, *op.results))}
    assert left <= {"stablehlo.bitcast_convert", "func.return"}, left


@pytest.mark.parametrize("fn", [jnp.tan, jnp.tanh, jnp.arcsinh, jnp.arccos])
def test_complex_edges_as_xla(fn):
    """Infinite, NaN, huge and zero parts through the complex expansion (tan and tanh's
    formulas, composites' decompositions), on the reference rules, against XLA's CPU backend:
    NaN where XLA gives NaN, and zeros signed as XLA signs them."""
    edges = np.array([-np.inf, -1e30, -30.0, -1.0, -0.0, 0.0, 1.0, 30.0, 1e30, np.inf, np.nan],
                     np.float32)
    z = np.empty((edges.size, edges.size), np.complex64)
    z.real, z.imag = edges[:, None], edges[None, :]   # (every pair, none mixed by arithmetic)
    _, (ours,) = run_expanded(fn, (z,), primitives())
    (theirs,) = run_on_xla_cpu(fn, (z,))
    for part in (np.real, np.imag):
        a, t = part(ours), part(np.asarray(theirs))
        assert np.array_equal(np.isnan(a), np.isnan(t)), (fn.__name__, part.__name__, z[
            np.isnan(a) != np.isnan(t)])
        zeros = t == 0
        assert np.array_equal(np.signbit(a[zeros]), np.signbit(t[zeros])), fn.__name__
        finite = np.isfinite(t)
        assert np.allclose(a[finite], t[finite], rtol=1e-5, atol=1e-6), fn.__name__
        assert np.array_equal(a[np.isinf(t)], t[np.isinf(t)]), fn.__name__


def test_complex_cond_and_complex128():
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
        assert_agrees(_cond, cplx(rng, (2, 3), np.complex128), np.bool_(True))
        assert_agrees(_cond, cplx(rng, (2, 3), np.complex128), np.bool_(False))


def test_complex_ops_without_a_rewrite_are_unimplemented_naming_them():
    # An ordering compare of complex numbers has no meaning, so no rewrite.
    program = lower_program(lambda a: a + 1, cplx(np.random.default_rng(0), (2,)))
    add = next(op for op in walk_ops(program) if op.name == "stablehlo.add")
    add.name = "stablehlo.atan2"  # a binary op with no complex rule
    with pytest.raises(Unimplemented, match=r"stablehlo.atan2 on complex64 has no rewrite"):
        expansions.expand(program, primitives())


def test_a_backend_with_complex_types_keeps_its_program():
    program = lower_program(lambda a: a * a, cplx(np.random.default_rng(0), (2,)))
    assert expansions.expand(program, primitives(REAL_ONLY | {"complex64"})) is program


# -- op expansions: the table mechanism ---------------------------------------------------------

def _subtract_as_add(op, program):
    """a - b = a + (-b): exactly the op's result, as an expansion must."""
    b = OpBuilder(op.location)
    negated = b.negate(op.operands[1])
    b.emit_into("stablehlo.add", (op.operands[0], negated), op.results)
    return b.ops


@pytest.fixture
def subtract_expansion(monkeypatch):
    monkeypatch.setattr(expansions, "op_expansions",
                        lambda: {"stablehlo.subtract": _subtract_as_add})


def _subtract(a, b):
    return a - b * 2


def test_an_expansion_replaces_what_the_set_lacks(subtract_expansion):
    ops = RULES.op_names - {"stablehlo.subtract"}
    args = (np.arange(4.0, dtype=np.float32), np.ones(4, np.float32))
    program = assert_agrees(_subtract, *args, prims=primitives(ops=ops))
    names = [op.name for op in walk_ops(program)]
    assert "stablehlo.subtract" not in names and "stablehlo.negate" in names


def test_the_backends_own_rule_wins_over_an_expansion(subtract_expansion):
    args = (np.arange(4.0, dtype=np.float32), np.ones(4, np.float32))
    program = lower_program(_subtract, *args)
    assert expansions.expand(program, primitives()) is not None
    names = [op.name for op in walk_ops(expansions.expand(program, primitives()))]
    assert "stablehlo.subtract" in names and "stablehlo.negate" not in names


def test_an_op_on_an_undeclared_dtype_is_expanded(subtract_expansion):
    # subtract is declared, float64 is not: the float64 subtract is not implemented.
    args = (np.arange(4.0), np.ones(4))
    with jax.enable_x64(True):
        program = lower_program(_subtract, *args)
    names = [op.name for op in walk_ops(expansions.expand(program,
                                                          primitives(REAL_ONLY - {"float64"})))]
    assert "stablehlo.subtract" not in names


def test_an_expansion_that_never_ends_is_reported(monkeypatch):
    def forever(op, program):
        return [dataclasses.replace(op)]

    monkeypatch.setattr(expansions, "op_expansions", lambda: {"stablehlo.subtract": forever})
    program = lower_program(_subtract, np.ones(2, np.float32), np.ones(2, np.float32))
    with pytest.raises(Unimplemented, match="did not terminate"):
        expansions.expand(program, primitives(ops=RULES.op_names - {"stablehlo.subtract"}))


def test_expansion_tables_are_collected_with_normalized_keys():
    table = expansions.op_expansions()
    assert all(callable(fn) for fn in table.values())
    assert not any(key.startswith("custom_call @") for key in table)
    assert expansions._normalized("custom_call @Qr") == "stablehlo.custom_call@Qr"


# -- through the core: the facade expands before pjrtkit_compile ---------------------------------

class RealOnlyBackend:
    """The reference rules, declaring only real types: complex programs reach its compile
    rewritten onto pairs."""

    def __init__(self):
        self.compiled = []

    @hookimpl
    def pjrtkit_platform(self):
        from pjrtkit.types import PlatformInfo
        return PlatformInfo(name="pjrtkit_realonly", version="0", device_kind="test")

    @hookimpl
    def pjrtkit_primitive_set(self):
        return primitives()

    @hookimpl
    def pjrtkit_capabilities(self):
        return Capabilities(dtypes=REAL_ONLY, ops=RULES.op_names)

    @hookimpl
    def pjrtkit_compile(self, program, options, devices):
        from pjrtkit.types import CompiledProgram
        self.compiled.append(program)
        return CompiledProgram(executable=build_plan(program, RULES))


def test_the_facade_expands_programs_and_widens_capabilities():
    plugin = RealOnlyBackend()
    backend = Backend("realonly", plugin)
    assert backend.primitive_set() == primitives()
    caps = backend.capabilities()
    assert {"complex64", "complex128", "float8_e4m3fn", "int4"} <= caps.dtypes
    program = lower_program(lambda a: a * a, cplx(np.random.default_rng(0), (2,)))
    backend.compile(program=program, options=OPTIONS, devices=())
    compiled = plugin.compiled[-1]
    assert compiled is not program
    assert "stablehlo.multiply" in {op.name for op in walk_ops(compiled)}
    assert not any(op.name == "stablehlo.multiply" and op.results[0].type.dtype.kind == "c"
                   for op in walk_ops(compiled))


def test_without_a_primitive_set_programs_reach_the_plugin_as_written():
    import template_backend

    plugin_programs = []
    original = template_backend.pjrtkit_compile

    class Recording:
        @hookimpl
        def pjrtkit_compile(self, program, options, devices):
            plugin_programs.append(program)
            return original(program, options, devices)

    backend = Backend("template", template_backend)
    assert backend.primitive_set() is None
    backend.plugin_manager.register(Recording())
    program = lower_program(lambda a: a + a, np.ones(2, np.float32))
    backend.compile(program=program, options=OPTIONS, devices=())
    assert plugin_programs == [program]


# -- rewrites a backend's rule calls for a case it lacks ----------------------------------------

def _rewritten(fn, args, name, expansion):
    """``fn``'s program with each ``name`` op replaced by ``expansion``'s ops, run by the
    reference rules."""
    program = lower_program(fn, *args)
    assert any(_has_groups_or_batching(op) for op in walk_ops(program) if op.name == name)
    replace_ops(program, name, expansion)
    assert name not in {op.name for op in walk_ops(program)} or all(
        not _has_groups_or_batching(op) for op in walk_ops(program) if op.name == name)
    flat = [np.asarray(a) for a in args]
    return [np.asarray(r) for r in build_plan(program, RULES)(*flat)]


def _has_groups_or_batching(op):
    a = op.attributes
    if op.name == "stablehlo.gather":
        return bool(a["dimension_numbers"].operand_batching_dims)
    if op.name == "stablehlo.scatter":
        return bool(a["scatter_dimension_numbers"].input_batching_dims)
    return (a.get("feature_group_count", 1), a.get("batch_group_count", 1)) != (1, 1)


def test_batched_gather_scatter_and_grouped_convolution_rewrites():
    from pjrtkit.expansions.batched_indexing import (gather_without_batching,
                                                     scatter_without_batching)
    from pjrtkit.expansions.convolution import ungrouped_convolution

    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 6)).astype(np.float32)
    order = np.argsort(x, axis=1).astype(np.int32)
    cases = [
        (lambda a, i: jnp.take_along_axis(a, i, axis=1), (x, order), "stablehlo.gather",
         gather_without_batching),
        (lambda a, i: jax.grad(lambda a: jnp.sum(jnp.take_along_axis(a, i, 1) ** 2))(a),
         (x, order), "stablehlo.scatter", scatter_without_batching),
        (lambda a, k: lax.conv_general_dilated(a, k, (1, 1), "SAME", feature_group_count=2),
         (rng.normal(size=(2, 4, 5, 5)).astype(np.float32),
          rng.normal(size=(6, 2, 3, 3)).astype(np.float32)), "stablehlo.convolution",
         ungrouped_convolution),
        (lambda a, k: lax.conv_general_dilated(a, k, (1, 1), "VALID", batch_group_count=2),
         (rng.normal(size=(4, 3, 5, 5)).astype(np.float32),
          rng.normal(size=(4, 3, 2, 2)).astype(np.float32)), "stablehlo.convolution",
         ungrouped_convolution),
    ]
    for fn, args, name, expansion in cases:
        ours = _rewritten(fn, args, name, expansion)
        for a, b in zip(ours, run_on_xla_cpu(fn, args)):
            assert_close(a, b, loosen=4.0)


# -- rng_bit_generator as integer arithmetic ---------------------------------------------------

@pytest.mark.parametrize("algorithm", ["DEFAULT", "PHILOX", "THREE_FRY"])
@pytest.mark.parametrize("shape,dtype", [((4,), np.uint64), ((3, 5), np.uint32), ((7,), np.uint8),
                                         ((2, 3), np.uint16), ((), np.uint32), ((5,), np.uint64)])
def test_rng_bit_generator_is_bit_identical_to_xla(algorithm, shape, dtype):
    algo = getattr(lax.RandomAlgorithm, f"RNG_{algorithm}")

    def fn(state):
        return lax.rng_bit_generator(state, shape, dtype=dtype, algorithm=algo)

    state = np.array([0x0123456789ABCDEF, 0xFFFFFFFFFFFFFFFE], np.uint64)  # the counter wraps
    lacking = RULES.op_names - {"stablehlo.rng_bit_generator"}
    with jax.enable_x64(True):
        program = assert_agrees(fn, state, prims=primitives(ops=lacking))
    assert "stablehlo.rng_bit_generator" not in {op.name for op in walk_ops(program)}


CONVOLUTIONS = {
    "same": (lambda a, k: lax.conv_general_dilated(a, k, (1, 1), "SAME"), (2, 3, 6, 5),
             (4, 3, 3, 3)),
    "strided_dilated": (lambda a, k: lax.conv_general_dilated(
        a, k, (2, 1), ((1, 2), (0, 1)), lhs_dilation=(1, 2), rhs_dilation=(2, 1)), (1, 2, 7, 6),
        (3, 2, 2, 3)),
    "grouped_nhwc": (lambda a, k: lax.conv_general_dilated(
        a, k, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=2), (2, 5, 5, 4), (2, 2, 2, 6)),
    "conv1d_transpose": (lambda a, k: lax.conv_transpose(a, k, (2,), "SAME",
                                                         dimension_numbers=("NCH", "OIH", "NCH")),
                         (1, 3, 8), (2, 3, 3)),
}


@pytest.mark.parametrize("name", sorted(CONVOLUTIONS))
def test_convolution_as_dots_for_a_backend_without_convolution(name):
    fn, lhs_shape, rhs_shape = CONVOLUTIONS[name]
    rng = np.random.default_rng(len(name))
    args = (rng.normal(size=lhs_shape).astype(np.float32),
            rng.normal(size=rhs_shape).astype(np.float32))
    program = assert_agrees(fn, *args, prims=primitives(ops=RULES.op_names - {
        "stablehlo.convolution"}), loosen=4.0)
    assert "stablehlo.convolution" not in {op.name for op in walk_ops(program)}
    # a gradient (a convolution with window reversal and batch groups inside)
    grad = jax.grad(lambda a, k: jnp.sum(fn(a, k) ** 2), argnums=(0, 1))
    assert_agrees(grad, *args, prims=primitives(ops=RULES.op_names - {"stablehlo.convolution"}),
                  loosen=8.0)


def test_jax_level_expansions_join_a_primitive_backends_rules(monkeypatch):
    from pjrtkit.types import JaxLoweringRule

    mine, theirs = object(), object()
    monkeypatch.setattr(expansions, "jax_lowering_rules",
                        lambda: [JaxLoweringRule(mine, len), JaxLoweringRule(theirs, len)])

    class WithOwnRule(RealOnlyBackend):
        @hookimpl
        def pjrtkit_jax_lowering_rules(self):
            return [JaxLoweringRule(theirs, print)]

    rules = {id(r.primitive): r.rule for r in Backend("own", WithOwnRule()).jax_lowering_rules()}
    assert rules == {id(theirs): print, id(mine): len}  # the plugin's own rule wins
    import template_backend  # no primitive set: nothing added
    assert Backend("template", template_backend).jax_lowering_rules() == ()
