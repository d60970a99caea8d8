"""The loader on real JAX programs: one shared MLIR context, the attribute-decoder shortcuts, and
per-walk type and location caches give the same IR as decoding everything from scratch."""
from __future__ import annotations

import dataclasses
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from pjrtkit.errors import InvalidArgument
from pjrtkit.stablehlo import loader
from pjrtkit.stablehlo.ir import Block, Function, Op, Program, Region, Value, walk_ops
from pjrtkit.testing.programs import portable_artifact


def _mlp(w, b, x):
    return jnp.sum(jax.nn.relu(x @ w + b) ** 2)


def _conv(x, k):
    return lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                    feature_group_count=1)


def _indexing(x, i):
    return x[i].sum() + x.at[i].add(1.0).sum()


def _sort_compare(x):
    return jnp.sort(x), jnp.argsort(x), (x > 0.5).astype(jnp.bfloat16)


def _loops(x):
    y = lax.fori_loop(0, 3, lambda i, v: v * 0.5 + i, x)
    return lax.cond(y.sum() > 0, lambda v: v + 1, lambda v: v - 1, y)


def _misc(x, key):
    bits = lax.rng_bit_generator(key, (4,), algorithm=lax.RandomAlgorithm.RNG_PHILOX)[1]
    spectrum = jnp.fft.fft(x.astype(jnp.complex64))
    precise = jnp.dot(x, x, precision=lax.Precision.HIGHEST)
    reduced = lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10)
    return bits, spectrum, precise, reduced, jnp.arange(4, dtype=jnp.int8), jnp.float16(3)


PROGRAMS = {
    "mlp": (_mlp, np.ones((8, 4), np.float32), np.zeros(4, np.float32), np.ones((2, 8), np.float32)),
    "conv": (_conv, np.ones((1, 6, 6, 2), np.float32), np.ones((3, 3, 2, 4), np.float32)),
    "indexing": (_indexing, np.arange(12.0, dtype=np.float32).reshape(4, 3), np.array([0, 2])),
    "sort_compare": (_sort_compare, np.linspace(0, 1, 8, dtype=np.float32)),
    "loops": (_loops, np.ones(5, np.float32)),
    "misc": (_misc, np.ones((4, 4), np.float32), np.zeros(4, np.uint32)),
}


@pytest.fixture(scope="module")
def artifacts() -> dict[str, bytes]:
    return {name: portable_artifact(fn, *args) for name, (fn, *args) in PROGRAMS.items()}


def _fresh_context_load(code: bytes) -> Program:
    with loader._LOCK:
        loader._shared_context = None
    return loader.load_program(code)


def _assert_same_ir(a, b, path="program") -> None:
    """Structural equality: same ops, value ids, types, attributes (arrays bit for bit) and
    locations, in the same order."""
    assert type(a) is type(b), path
    if isinstance(a, np.ndarray):
        assert (a.dtype, a.shape, a.tobytes()) == (b.dtype, b.shape, b.tobytes()), path
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for key in a:
            _assert_same_ir(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same_ir(x, y, f"{path}[{i}]")
    elif isinstance(a, Value):
        assert (a.id, a.type) == (b.id, b.type), path
    elif isinstance(a, (Op, Block, Region, Function, Program)):
        for field in dataclasses.fields(a):
            _assert_same_ir(getattr(a, field.name), getattr(b, field.name), f"{path}.{field.name}")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def test_loads_share_one_context_and_give_the_ir_of_a_fresh_one(artifacts):
    fresh = {name: _fresh_context_load(code) for name, code in artifacts.items()}
    loader.load_program(artifacts["mlp"])
    context = loader._shared_context
    for name, code in artifacts.items():
        _assert_same_ir(loader.load_program(code), fresh[name], name)
    assert loader._shared_context is context


def test_context_is_replaced_once_its_budget_is_used(artifacts, monkeypatch):
    code = artifacts["mlp"]
    monkeypatch.setattr(loader, "CONTEXT_REUSE_BYTES", 2 * len(code))
    expected = _fresh_context_load(code)
    assert loader._shared_context is not None  # one program's bytes: under budget
    loader.load_program(code)
    assert loader._shared_context is None  # two: dropped after the load
    _assert_same_ir(loader.load_program(code), expected)
    assert loader._shared_context is not None


@pytest.mark.parametrize("garbage", [
    b"func.func @main() { %0 = stablehlo.bogus_one : tensor<f32> }",
    b"ML\xefR\x00truncated",
    "func.func @main( {",
])
def test_parse_errors_in_a_shared_context_read_as_in_a_fresh_one(artifacts, garbage):
    with pytest.raises(InvalidArgument, match="could not parse the program") as fresh:
        _fresh_context_load(garbage)
    for name in artifacts:  # the context has seen other programs and other errors
        loader.load_program(artifacts[name])
        with pytest.raises(InvalidArgument) as shared:
            loader.load_program(garbage)
        assert str(shared.value) == str(fresh.value)
    _assert_same_ir(loader.load_program(artifacts["mlp"]), _fresh_context_load(artifacts["mlp"]))


def test_concurrent_loads_from_many_threads(artifacts):
    expected = {name: _fresh_context_load(code) for name, code in artifacts.items()}
    results: list[tuple[str, Program]] = []
    errors: list[BaseException] = []

    def work(names):
        try:
            for name in names * 3:
                results.append((name, loader.load_program(artifacts[name])))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    names = list(artifacts)
    threads = [threading.Thread(target=work, args=(names[i:] + names[:i],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 4 * 3 * len(names)
    for name, program in results:
        _assert_same_ir(program, expected[name], name)


def _mlir_attributes(code: bytes):
    """Every attribute of every op, function and module of ``code``, as jaxlib hands them out
    (nested in arrays and dictionaries too)."""
    from jax._src.interpreters import mlir as jax_mlir
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    context = jax_mlir.make_ir_context()
    with context, ir.Location.unknown():
        module = stablehlo.deserialize_portable_artifact(context, code)
        found = []

        def nested(attr):
            found.append(attr)
            if isinstance(attr, ir.ArrayAttr):
                for a in attr:
                    nested(a)
            elif isinstance(attr, ir.DictAttr):
                for i in range(len(attr)):
                    nested(attr[i].attr)

        def visit(operation):
            for i in range(len(operation.attributes)):
                nested(operation.attributes[i].attr)
            for region in operation.regions:
                for block in region.blocks:
                    for op in block.operations:
                        visit(op.operation)

        visit(module.operation)
        yield found


def test_attribute_shortcuts_pick_what_the_full_search_picks(artifacts):
    kinds = set()
    for name, code in artifacts.items():
        for attributes in _mlir_attributes(code):
            walker = loader._Walker()
            decoders = walker.decoders
            for attr in attributes:
                fast = decoders.decoder_for(attr)(walker, attr)
                slow = decoders.search(attr)(walker, attr)
                _assert_same_ir(fast, slow, f"{name}: {attr}")
                kinds.add(type(fast).__name__)
    # the programs cover the decoders that matter: arrays, scalars, strings, records, opaque
    assert {"ndarray", "tuple", "int", "bool", "str", "dict", "DotDimensionNumbers",
            "ConvDimensionNumbers", "GatherDimensionNumbers", "ScatterDimensionNumbers",
            "OpaqueAttribute"} <= kinds


def test_values_of_one_type_share_one_decoded_type(artifacts):
    program = loader.load_program(artifacts["mlp"])
    by_type = {}
    for op in walk_ops(program):
        for value in (*op.operands, *op.results):
            by_type.setdefault(value.type, value.type)
            assert by_type[value.type] is value.type
    assert len(by_type) > 3


def test_locations_name_the_source_of_each_op():
    from jax._src.lib import _jax
    from jaxlib.mlir.dialects import stablehlo

    fn, *args = PROGRAMS["mlp"]
    text = jax.jit(fn).lower(*args).as_text(debug_info=True)
    code = _jax.mlir.serialize_portable_artifact(text, stablehlo.get_current_version(), False)
    ops = [op for op in walk_ops(loader.load_program(code)) if op.name != "func.return"]
    fresh = [op for op in walk_ops(_fresh_context_load(code)) if op.name != "func.return"]
    assert [op.location for op in ops] == [op.location for op in fresh]
    assert all(len(op.location) <= 160 for op in ops)
    dots = [op for op in ops if op.name == "stablehlo.dot_general"]
    assert dots and all("_mlp" in op.location for op in dots)
    assert len({op.location for op in ops}) < len(ops)  # ops of one source line share it


def test_attribute_shortcuts_on_every_builtin_kind():
    """Builtin attributes as Python code builds them (not always downcast the way jaxlib hands
    them out: an i1 IntegerAttr stays an IntegerAttr)."""
    from jax._src.interpreters import mlir as jax_mlir
    from jaxlib.mlir import ir

    with jax_mlir.make_ir_context(), ir.Location.unknown():
        i1, i32, f32 = (ir.IntegerType.get_signless(1), ir.IntegerType.get_signless(32),
                        ir.F32Type.get())
        attributes = [
            ir.IntegerAttr.get(i1, 1), ir.IntegerAttr.get(i32, -7), ir.BoolAttr.get(False),
            ir.FloatAttr.get(f32, 1.5), ir.StringAttr.get("s"), ir.UnitAttr.get(),
            ir.FlatSymbolRefAttr.get("f"), ir.Attribute.parse("@outer::@inner"),
            ir.DenseI8ArrayAttr.get([1, -2]), ir.DenseI16ArrayAttr.get([3]),
            ir.DenseI32ArrayAttr.get([4, 5]), ir.DenseI64ArrayAttr.get([]),
            ir.DenseBoolArrayAttr.get([True, False]), ir.DenseF32ArrayAttr.get([0.5]),
            ir.DenseF64ArrayAttr.get([2.5, -1.0]), ir.TypeAttr.get(f32),
            ir.TypeAttr.get(ir.RankedTensorType.get([2], f32)),
            ir.Attribute.parse("dense<[1, 2]> : tensor<2xi32>"),
            ir.Attribute.parse("dense<[true, false, true]> : tensor<3xi1>"),
            ir.Attribute.parse('dense<"0x0000803F"> : tensor<1xf32>'),
            ir.Attribute.parse("dense<1.0> : tensor<2x2xbf16>"),
            ir.Attribute.parse("affine_map<(d0) -> (d0)>"),
            ir.Attribute.parse("[1 : i64, true, {k = 2.0 : f32}]"),
            ir.Attribute.parse("{a = 1 : i32, b = array<i64: 1>}"),
            ir.Attribute.parse("#stablehlo<comparison_direction LT>"),
            ir.Attribute.parse("#stablehlo<precision HIGHEST>"),
            ir.Attribute.parse("#stablehlo<fft_type IFFT>"),
            ir.Attribute.parse("#stablehlo<transpose ADJOINT>"),
            ir.Attribute.parse("#stablehlo<rng_algorithm PHILOX>"),
            ir.Attribute.parse("#stablehlo.output_operand_alias<output_tuple_indices = [0], "
                               "operand_index = 1, operand_tuple_indices = []>"),
            ir.Attribute.parse("#stablehlo.conv<[b, 0, f]x[0, i, o]->[b, 0, f]>"),
        ]
        walker = loader._Walker()
        for attr in attributes:
            fast = walker.decoders.decoder_for(attr)(walker, attr)
            slow = walker.decoders.search(attr)(walker, attr)
            _assert_same_ir(fast, slow, str(attr))
        decoded = [walker.attribute(attr) for attr in attributes]
        expected = [-1, -7, False, 1.5, "s", True, "f", None, (1, -2), (3,), (4, 5), (), (True, False),
                    (0.5,), (2.5, -1.0)]  # i1 read as a signless integer: -1, as ever
        for got, want in zip(decoded, expected):
            if want is not None:
                assert got == want and type(got) is type(want), (got, want)
        assert [type(x) for x in decoded[8:12]] == [tuple] * 4
        assert all(type(x) is int for t in decoded[8:12] for x in t)
        assert type(decoded[7]).__name__ == "OpaqueAttribute"  # nested symbol reference
