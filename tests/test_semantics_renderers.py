"""The drift test: every elementwise op x dtype of ``pjrtkit.semantics``, rendered by each code
generator (the NumPy rules, the cpu plugin's Numba emitter, the core's elementwise VM, the GPU
plugins' Triton emitter under Triton's interpreter), agrees with XLA's CPU backend in the same process, or the
generator declines it with a reason naming the op and the dtype.

Per dtype, one JAX program applies every op the semantics define on that dtype (each to
program arguments, each its own output); XLA's CPU backend runs it once, the reference
registry once, and each emitter renders each op of its StableHLO into one kernel (one Numba
compile, one Triton kernel per dtype). Inputs hold the edge cases the semantics speak of
(zeros of both signs, infinities, NaN, INT_MIN and -1, shift amounts around the width) and
every value of the 8-bit and narrower types.
"""
from __future__ import annotations

import math
import zlib

import jax
import numpy as np
import pytest
from jax import lax

from pjrtkit.errors import Unimplemented
from pjrtkit.reference import REFERENCE
from pjrtkit import jax_compat
from pjrtkit.semantics import dtypes as D, ops
from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo.ir import Block, Function, Op, Program, Region, TensorType, Value, walk_ops
from pjrtkit.testing.programs import lower_program, run_on_xla_cpu, run_with_registry
from pjrtkit.testing.tolerances import assert_close, tolerance
from pjrtkit.testing.ulps import ulp_error

N = 64
D_INT_NAMES = tuple(d.name for d in D.ALL if D.is_int(d))
D_FLOAT_NAMES = tuple(d.name for d in D.ALL if D.is_float(d))
SHIFTS = {"shift_left", "shift_right_arithmetic", "shift_right_logical"}


def _round(method):
    return lambda x: lax.round(x, method)


LAX = {
    "add": lax.add, "subtract": lax.sub, "multiply": lax.mul, "divide": lax.div,
    "remainder": lax.rem, "power": lax.pow, "maximum": lax.max, "minimum": lax.min,
    "atan2": lax.atan2, "and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor,
    "shift_left": lax.shift_left, "shift_right_arithmetic": lax.shift_right_arithmetic,
    "shift_right_logical": lax.shift_right_logical, "abs": lax.abs, "negate": lax.neg,
    "sign": lax.sign, "not": lax.bitwise_not, "popcnt": lax.population_count,
    "count_leading_zeros": lax.clz, "floor": lax.floor, "ceil": lax.ceil,
    "round_nearest_even": _round(lax.RoundingMethod.TO_NEAREST_EVEN),
    "round_nearest_afz": _round(lax.RoundingMethod.AWAY_FROM_ZERO),
    "sqrt": lax.sqrt, "rsqrt": lax.rsqrt, "cbrt": lax.cbrt, "exponential": lax.exp,
    "exponential_minus_one": lax.expm1, "log": lax.log, "log_plus_one": lax.log1p,
    "logistic": lax.logistic, "tanh": lax.tanh, "sine": lax.sin, "cosine": lax.cos,
    "tan": lax.tan, "is_finite": lax.is_finite, "clamp": lax.clamp,
    "reduce_precision": lambda x: lax.reduce_precision(x, exponent_bits=5, mantissa_bits=2),
}
COMPARISONS = {"EQ": lax.eq, "NE": lax.ne, "LT": lax.lt, "LE": lax.le, "GT": lax.gt,
               "GE": lax.ge}
# (op, dtype) the semantics define that no JAX program applies to its arguments (JAX refuses
# the op on the dtype, or writes it with other ops): no XLA answer for them here.
_UNSIGNED = ("uint8", "uint16", "uint32", "uint64", "uint2", "uint4")
_COMPLEX = ("complex64", "complex128")
JAX_CANNOT_WRITE: dict[tuple[str, str], str] = {
    **{("abs", d): "lax.abs refuses unsigned and sub-byte integers"
       for d in (*_UNSIGNED, "int2", "int4")},
    **{("sign", d): "JAX writes sign of an unsigned integer as a select" for d in _UNSIGNED},
    **{(op, "bool"): "lax.add/lax.mul refuse bool" for op in ("add", "multiply")},
    **{("power", d): "lax.pow refuses integer bases (JAX has integer_pow instead)"
       for d in (*D_INT_NAMES,)},
    **{("logistic", d): "JAX writes logistic as 1 / (1 + exp(-x))"
       for d in (*D_FLOAT_NAMES, *_COMPLEX)},
    **{(op, d): "JAX writes complex sin/cos/exp/log/log1p/sqrt with real ops"
       for op in ("sine", "cosine", "exponential", "log", "log_plus_one", "sqrt")
       for d in _COMPLEX},
}
# Known differences between the NumPy rules and XLA, the dtype sweep's xfails
# (plugins/cpu/tests/test_dtype_sweep.py): float4's +-6 converted to an integer (XLA gives the
# type's extreme), complex power of large magnitudes (XLA's exp(b log a) vs C's cpow).
KNOWN = {(f"convert_to_{t}", "float4_e2m1fn") for t in D_INT_NAMES} | {
    ("power", "complex64"), ("power", "complex128")}


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _values(dtype: np.dtype, which: int, shift: bool = False) -> np.ndarray:
    """N (or every) values of ``dtype`` with the semantics' edge cases first."""
    rng = _rng(f"{dtype.name}/{which}/{shift}")
    facts = D.facts(dtype)
    if dtype == D.BOOL:
        return rng.integers(0, 2, N).astype(bool)
    if D.is_int(dtype):
        low, high = D.int_range(dtype)
        if shift:
            return rng.integers(-1, facts.bits + 3, N).astype(dtype)
        if facts.bits <= 8:
            values = np.arange(low, high + 1)
            return np.resize(rng.permutation(values) if which else values, max(N, values.size)
                             ).astype(dtype)
        edges = [0, 1, -1, 2, low, high, low + 1, 7, -7, 3]
        edges = [e for e in edges if low <= e <= high]
        body = np.where(rng.random(N) < 0.5, rng.integers(low, high, N, dtype=np.int64
                                                          if low < 0 else np.uint64,
                                                          endpoint=True),
                        rng.integers(max(low, -40), 40, N))
        return np.concatenate([np.array(edges, dtype=np.int64 if low < 0 else np.uint64),
                               body])[:N].astype(dtype)
    if D.is_complex(dtype):
        part = D.real_part_of(dtype)
        z = _values(part, which) + 1j * _values(part, which + 7)
        return z.astype(dtype)
    if facts.bits <= 8:  # every value
        count = 1 << facts.bits
        bits = np.arange(count, dtype=np.uint8)
        bits = rng.permutation(bits) if which else bits
        return np.resize(bits, max(N, count)).view(dtype)
    largest, tiny = D.float_limits(dtype)
    edges = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, -2.5, 2.0, 3.0, -0.75,
             tiny, largest, -largest]
    if D.compute_dtype(dtype) != dtype:
        # denormals of a type computed in a wider one (float32 and float64 denormals XLA's
        # CPU flushes and pjrtkit computes: README, "Element types on pjrtkit_cpu")
        edges += [-tiny / 4, tiny / 2]
    body = rng.standard_normal(N) * rng.choice([1e-3, 0.3, 1.0, 3.0, 40.0], N)
    return np.concatenate([np.array(edges), body])[:N].astype(dtype)


def _ops_on(dtype: np.dtype) -> list[tuple[str, ops.OpTraits]]:
    kind = D.facts(dtype).kind
    return [(name, t) for name, t in sorted(ops.ELEMENTWISE.items())
            if kind in t.kinds and name not in ("compare", "convert")]


def _outputs(dtype: np.dtype):
    """(label, function of the three inputs) for every op x variant defined on ``dtype``."""
    out = []
    for name, traits in _ops_on(dtype):
        if name == "select":
            out.append((name, lambda x, y, z, p: lax.select(p, x, y)))
        elif traits.arity == 1:
            out.append((name, lambda x, y, z, p, fn=LAX[name]: fn(x)))
        elif traits.arity == 2:
            out.append((name, lambda x, y, z, p, fn=LAX[name], name=name:
                        fn(x, z if name in SHIFTS else y)))
        else:  # clamp(low, x, high)
            out.append((name, lambda x, y, z, p, fn=LAX[name]: fn(y, x, z)))
    for direction, fn in COMPARISONS.items():
        if D.is_complex(dtype) and direction not in ("EQ", "NE"):
            continue
        out.append((f"compare_{direction}", lambda x, y, z, p, fn=fn: fn(x, y)))
    for target in D.ALL:
        if target != dtype:
            out.append((f"convert_to_{target.name}",
                        lambda x, y, z, p, t=target: lax.convert_element_type(x, t)))
    return out


def _jax_accepts(fn, args) -> bool:
    try:
        jax.eval_shape(fn, *args)
    except (TypeError, ValueError):
        return False
    return True


class Case:
    """One dtype's program: the outputs JAX can express, XLA's answers, the lowered ops
    (``usable``: the outputs JAX computes with one elementwise op of the program's
    arguments; the rest, e.g. a convert to bool JAX writes as a compare with 0, are still
    checked through the NumPy rules)."""

    def __init__(self, dtype: np.dtype):
        self.dtype = dtype
        shifts = D.is_int(dtype)
        args = (_values(dtype, 0), _values(dtype, 1), _values(dtype, 2, shift=shifts),
                _values(D.BOOL, 3))
        size = max(a.size for a in args)  # every value of an 8-bit type: more than N
        self.args = tuple(np.resize(a, size) for a in args)
        self.refused = []
        self.labels, functions = [], []
        for label, fn in _outputs(dtype):
            if _jax_accepts(fn, self.args):
                self.labels.append(label)
                functions.append(fn)
            else:
                self.refused.append(label)

        def program(x, y, z, p):
            return tuple(fn(x, y, z, p) for fn in functions)

        self.fn = program
        self.expected = run_on_xla_cpu(program, self.args)
        lowered = lower_program(program, *self.args)
        main = lowered.functions[lowered.entry]
        producers = {r.id: op for op in walk_ops(lowered) for r in op.results}
        self.inputs = list(main.body.entry.arguments)
        arguments = {a.id for a in self.inputs}
        self.ops = [producers.get(v.id) for v in main.body.entry.ops[-1].operands]
        self.usable = [k for k, op in enumerate(self.ops)
                       if op is not None and ops.traits(op.name) is not None
                       and all(v.id in arguments for v in op.operands)]


_CASES: dict[str, Case] = {}


def case_of(dtype) -> Case:
    dtype = np.dtype(dtype)
    if dtype.name not in _CASES:
        with jax.enable_x64(True):
            _CASES[dtype.name] = Case(dtype)
    return _CASES[dtype.name]


DTYPE_NAMES = [d.name for d in D.ALL]
# make test runs the four generators on these dtypes (bool, a sub-byte, a 32-bit and a 64-bit
# integer, every value of uint8, bfloat16 computed wider, float32, every value of an 8-bit
# float, complex): a few seconds each; make test-long (which CI runs) on every other dtype.
FAST_DTYPES = {"bool", "int4", "int32", "uint64", "uint8", "bfloat16", "float32", "float8_e4m3fn",
               "complex64"}
DTYPE_PARAMS = [pytest.param(name, marks=() if name in FAST_DTYPES else pytest.mark.long)
                for name in DTYPE_NAMES]


def _check(case: Case, label: str, got, expected, generator: str):
    """Values as XLA's, at the result dtype's tolerance (exact for integers and the 8-bit and
    narrower floats; any NaN equals any NaN: XLA leaves the payload open)."""
    if (label, case.dtype.name) in KNOWN:
        return
    got, expected = np.asarray(got), np.asarray(expected)
    what = f"{generator}: {label} on {case.dtype.name}"
    if label == "atan2":
        # XLA's atan2 polynomial loses denormal operands (measured: atan2(-d, -d) is -pi/2,
        # atan2(d, d) pi/2 on XLA's CPU); the semantics are C's atan2 there
        _, tiny = D.float_limits(case.dtype)
        normal = [np.abs(a.astype(np.float64)) >= tiny for a in case.args[:2]]
        keep = (normal[0] | (case.args[0] == 0)) & (normal[1] | (case.args[1] == 0))
        got, expected = got[keep], expected[keep]
    assert got.dtype == expected.dtype and got.shape == expected.shape, what
    if D.is_float(expected.dtype) or D.is_complex(expected.dtype):
        wide = np.complex128 if D.is_complex(expected.dtype) else np.float64
        rtol, atol = tolerance(expected.dtype)
        traits = ops.traits(label)
        if traits is not None and traits.transcendental and D.bit_width(expected.dtype) <= 8:
            # XLA's own approximations (expm1 as exp - 1 in float16, ...) can land one step
            # of these coarse types away after the double rounding: one ulp
            assert np.all(ulp_error(got, expected.astype(np.float64), expected.dtype) <= 1), \
                what
            return
        np.testing.assert_allclose(got.astype(wide), expected.astype(wide), rtol=rtol,
                                   atol=atol, equal_nan=True, err_msg=what)
    else:
        assert_close(got, expected, what=what)


def _typed(op) -> tuple[str, str]:
    traits = ops.traits(op.name)
    return traits.name, op.operands[traits.typed_operand].type.dtype.name


@pytest.mark.long  # every dtype's case built and run on XLA in one test: 45-50 s of a worker
def test_the_programs_reach_every_op_and_dtype_the_semantics_define():
    """Every (op, dtype) of the semantics is applied to program arguments by some JAX program
    below (so every generator sees it), except the pairs JAX cannot write that way."""
    reached = set()
    for dtype in D.ALL:
        case = case_of(dtype)
        reached |= {_typed(case.ops[k]) for k in case.usable}
    defined = {(name, d.name) for name, t in ops.ELEMENTWISE.items() for d in D.ALL
               if D.facts(d).kind in t.kinds}
    cannot_write = set(JAX_CANNOT_WRITE)
    if jax_compat.jax_writes_complex_abs_as_real_arithmetic():
        cannot_write |= {("abs", "complex64"), ("abs", "complex128")}
    assert defined - reached == cannot_write, sorted(defined - reached)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_numpy_rules_render_every_op_like_xla(dtype):
    case = case_of(dtype)
    with jax.enable_x64(True), np.errstate(all="ignore"):
        got = run_with_registry(case.fn, case.args, REFERENCE)
    for k, label in enumerate(case.labels):
        expected = case.expected[k]
        if label == "convert_to_bool" and dtype == "bfloat16" and \
                jax_compat.xla_flushes_bfloat16_denormals_converting_to_bool():
            # XLA reads denormals as zero here; pjrtkit follows jaxlib 0.10's XLA (True): the
            # only difference allowed is True where XLA says False (the denormal inputs)
            differs = np.asarray(got[k]) != np.asarray(expected)
            assert np.all(np.asarray(got[k])[differs]), label
            expected = np.where(differs, np.asarray(got[k]), np.asarray(expected))
        _check(case, label, got[k], expected, "NumPy rules")


def _emulated_driver():
    from pjrtkit_gpu.drivers import emulated_driver

    return emulated_driver()


def _argument_index(case: Case, value) -> int:
    return [a.id for a in case.inputs].index(value.id)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_numba_emitter_renders_or_declines_naming_op_and_dtype(dtype):
    from pjrtkit_cpu.loopnest import module, optable

    case = case_of(dtype)
    body, outputs = [], []
    for k in case.usable:
        op = case.ops[k]
        args = [f"x{_argument_index(case, v)}[i]" for v in op.operands]
        lines = optable.emit(op, args, f"r{k}", vectorized=False)
        if lines is None:
            why = optable.explain(op)
            assert op.name in why and any(
                v.type.dtype.name in why for v in (*op.operands, *op.results)), why
            continue
        body += lines + [f"out{k}[i] = r{k}"]
        outputs.append(k)
    if not outputs:
        assert dtype not in {d.name for d in optable.DTYPES}
        return
    params = ", ".join(["x0", "x1", "x2", "x3", *(f"out{k}" for k in outputs)])
    # the drivers' decorator (module.NJIT) less its disk cache, which needs a source file
    source = "\n".join([*module.HEADER, "", module.NJIT.replace("cache=True, ", ""),
                        f"def kernel({params}):", "    for i in range(x0.shape[0]):",
                        *("        " + line for line in body)])
    namespace: dict = {}
    exec(compile(source, f"<numba {dtype}>", "exec"), namespace)  # noqa: S102
    results = {k: np.empty_like(np.asarray(case.expected[k])) for k in outputs}
    with np.errstate(all="ignore"):
        namespace["kernel"](*case.args, *results.values())
    for k in outputs:
        _check(case, case.labels[k], results[k], case.expected[k], "Numba emitter")


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_triton_emitter_renders_or_declines_naming_op_and_dtype(dtype):
    driver = _emulated_driver()  # first: it makes Triton interpret
    from pjrtkit_gpu import codegen, kernels
    from pjrtkit_gpu.elementwise_table import NoKernel, statements
    from pjrtkit_gpu.lowering.elementwise import chain_source

    case = case_of(dtype)
    rendered = []
    for k in case.usable:
        op = case.ops[k]
        try:
            statements(op, ["a"] * len(op.operands), "r")
        except NoKernel as exc:
            why = str(exc)
            assert op.name in why and any(
                v.type.dtype.name in why for v in (*op.operands, *op.results)), why
            continue
        rendered.append(k)
    if not rendered:
        return
    used = sorted({_argument_index(case, v) for k in rendered for v in case.ops[k].operands})
    inputs = [case.inputs[i] for i in used]
    outputs = [case.ops[k].results[0] for k in rendered]
    source = chain_source([case.ops[k] for k in rendered], inputs, outputs)
    kernel = codegen.load_kernel(source, "elementwise")
    n = case.args[0].size
    payloads = [driver.from_host(0, np.ascontiguousarray(case.args[i])) for i in used]
    results = [driver.empty(0, v.type.shape, v.type.dtype) for v in outputs]
    with np.errstate(all="ignore"):
        driver.launch(0, kernel, (math.ceil(n / kernels.ELEMENTWISE_BLOCK),),
                      [*payloads, *results, n], {"BLOCK": kernels.ELEMENTWISE_BLOCK})
    for k, payload in zip(rendered, results):
        _check(case, case.labels[k], driver.to_host(payload), case.expected[k],
               "Triton emitter")


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_elementwise_vm_renders_or_declines_naming_op_and_dtype(dtype):
    """Each op alone as a VM program over the case's arguments (read whole; the bool one as
    well), run by the compiled VM itself (its C entry, as the core's C execute path calls it)."""
    from pjrtkit import elementwise_vm
    from pjrtkit.elementwise_vm._vm_cffi import ffi, lib

    case = case_of(dtype)
    inputs = [elementwise_vm.Input(v.type.dtype, False, argument=i)
              for i, v in enumerate(case.inputs)]
    arguments = [np.ascontiguousarray(a) for a in case.args]
    ran = 0
    for k in case.usable:
        op = case.ops[k]
        try:
            program = elementwise_vm.render(Block(tuple(case.inputs), [op]), inputs,
                                            [op.results[0].id], case.args[0].size)
        except elementwise_vm.Declined as exc:
            why = str(exc)
            assert any(name in why for name in (op.name, _typed(op)[0])) or any(
                v.type.dtype.name in why for v in (*op.operands, *op.results)), why
            continue
        result = np.empty_like(np.asarray(case.expected[k]))
        pointers = ffi.new("void*[]", [ffi.cast("void*", a.ctypes.data) for a in arguments])
        out = ffi.new("void*[]", [ffi.cast("void*", result.ctypes.data)])
        assert lib.pjrtkit_vm_run(pointers, out, ffi.cast("void*", program.context)) == 0
        _check(case, case.labels[k], result, case.expected[k], "elementwise VM")
        ran += 1
    if dtype in ("float32", "float64", "int32", "int64", "uint8", "bool"):
        assert ran >= len(case.usable) // 2, (ran, len(case.usable))


def test_the_elementwise_vm_s_layout_numbers_agree_with_its_build():
    from pjrtkit.elementwise_vm import program
    from pjrtkit.elementwise_vm._vm_cffi import lib

    assert (lib.VM_VERSION, lib.VM_MAX_REGISTERS) == (program.VERSION, program.MAX_REGISTERS)


def test_the_elementwise_vm_s_float32_functions_are_generated_from_the_semantics():
    """float32_source.h (the C the VM is built with) is what the shared expressions give now,
    and the VM spells exactly the shared functions."""
    from pathlib import Path

    from pjrtkit.elementwise_vm import program, spellings
    from pjrtkit.semantics import float32_functions

    header = Path(program.__file__).with_name("float32_source.h").read_text()
    assert header == program.float32_c_source(), (
        "float32_source.h is stale: regenerate it with pjrtkit.elementwise_vm.program."
        "float32_c_source() and rebuild the VM")
    assert sorted(spellings.FLOAT32_FUNCTIONS) == sorted(float32_functions.FUNCTIONS)


def test_the_float32_functions_in_c_and_as_numpy_passes_agree():
    """The NumPy renderer computes the shared float32 functions in C (the VM's generated
    functions); without the VM it renders the same expression as NumPy passes. Both must give
    the same bits (the passes' float32 multiply-add goes through float64 and may differ where
    the float64 sum lands exactly halfway between two float32 values: about once in 2**29)."""
    from pjrtkit.reference import elementwise_numpy
    from pjrtkit.semantics import definitions, float32_functions
    from pjrtkit.semantics.scalar import schedule

    rng = np.random.default_rng(1)
    x = np.concatenate([
        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 1e-39, -1.0, -0.99999994, 88.8,
                  -104.5, 0.625, 10.0, 3e38], np.float32),
        (rng.standard_normal(50_000) * rng.choice([0.1, 1, 10, 80], 50_000)).astype(np.float32),
        rng.integers(0, 2**32, 50_000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    for name in sorted(float32_functions.FUNCTIONS):
        compiled = elementwise_numpy.numpy_kernel(name, [np.float32], np.float32)
        root = float32_functions.renderer_root(name, [np.float32], np.float32)
        order = schedule(root, lambda n: elementwise_numpy.spelling(n) is not None,
                         definitions.define, "test")
        with np.errstate(all="ignore"):
            in_c = compiled(x)
            passes = elementwise_numpy.evaluator(order, 1)(x)
        same = (in_c.view(np.uint32) == passes.view(np.uint32)) | (np.isnan(in_c)
                                                                   & np.isnan(passes))
        assert same.all(), (name, x[~same][:3], in_c[~same][:3], passes[~same][:3])


def test_every_generator_has_one_rule_per_op_of_the_semantics():
    from pjrtkit_cpu.loopnest import optable
    from pjrtkit_gpu.elementwise_table import OPS

    names = {t.op for t in ops.ELEMENTWISE.values()}
    assert set(optable.OP_TABLE) == names
    assert OPS == names
    assert names <= set(REFERENCE.rules)


def test_an_op_the_semantics_do_not_define_is_unimplemented_naming_op_and_dtype():
    """An ordering compare of complex numbers (which JAX never emits, a program may)."""
    c64 = TensorType((4,), D.COMPLEX64)
    a, b, r = Value(0, c64), Value(1, c64), Value(2, TensorType((4,), D.BOOL))
    body = [Op("stablehlo.compare", (a, b), (r,), {"comparison_direction": "LT",
                                                    "compare_type": "FLOAT"}),
            Op("func.return", (r,), (), {})]
    program = Program({"main": Function("main", (a, b), (r.type,), Region([Block((a, b),
                                                                                 body)]))},
                      "main", {})
    with pytest.raises(Unimplemented, match=r"stablehlo\.compare.*complex64"):
        build_plan(program, REFERENCE)
