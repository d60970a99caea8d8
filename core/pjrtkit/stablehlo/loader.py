"""Load a StableHLO program (portable artifact, MLIR bytecode or text) into the plain IR.

jaxlib's own MLIR bindings do the parsing; this module only walks the parsed module once and
decodes every attribute (table in ``pjrtkit.stablehlo.attributes``). After ``load_program``
returns, no MLIR object is referenced from the result.
"""
from __future__ import annotations

import re
import threading
from typing import Any

import ml_dtypes
import numpy as np

from pjrtkit.errors import InvalidArgument, Unimplemented
from pjrtkit.stablehlo import attributes as A
from pjrtkit.stablehlo.ir import (Block, Function, Op, Program, Region, TensorType, TokenType,
                                  TupleType, Value)

# MLIR contexts are not thread-safe and jaxlib compiles on worker threads; one load at a time.
_LOCK = threading.Lock()

# Successive loads share one MLIR context: making one with JAX's dialects costs about 2.5 ms, a
# tenth of compiling a small program. A load's operations belong to its module, freed when the
# load returns; what MLIR keeps for the context's lifetime is what it uniques (types,
# attributes including dense constants, locations). So the context is dropped, and the next
# load makes a fresh one, once the programs loaded into it add up to this many bytes.
CONTEXT_REUSE_BYTES = 16 << 20
_shared_context = None
_shared_context_bytes = 0

_ELEMENT_TYPES = {
    "i1": np.dtype(np.bool_), "i2": np.dtype(ml_dtypes.int2), "i4": np.dtype(ml_dtypes.int4),
    "i8": np.dtype(np.int8), "i16": np.dtype(np.int16), "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "ui2": np.dtype(ml_dtypes.uint2), "ui4": np.dtype(ml_dtypes.uint4),
    "ui8": np.dtype(np.uint8), "ui16": np.dtype(np.uint16), "ui32": np.dtype(np.uint32),
    "ui64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
    "complex<f32>": np.dtype(np.complex64), "complex<f64>": np.dtype(np.complex128),
    "f8E4M3FN": np.dtype(ml_dtypes.float8_e4m3fn), "f8E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "f8E4M3": np.dtype(ml_dtypes.float8_e4m3), "f8E3M4": np.dtype(ml_dtypes.float8_e3m4),
    "f8E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "f8E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8E4M3B11FNUZ": np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    "f8E8M0FNU": np.dtype(ml_dtypes.float8_e8m0fnu), "f4E2M1FN": np.dtype(ml_dtypes.float4_e2m1fn),
}


def element_dtype(element_type) -> np.dtype:
    key = str(element_type)
    try:
        return _ELEMENT_TYPES[key]
    except KeyError:
        raise Unimplemented(f"element type {key} is not supported by pjrtkit") from None


def load_program(code: bytes | str) -> Program:
    """Parse ``code`` (portable artifact, MLIR bytecode or MLIR text) and build a Program.

    Raises InvalidArgument when jaxlib cannot parse it (truncated or foreign bytes).
    """
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    from pjrtkit import jax_compat

    global _shared_context, _shared_context_bytes
    with _LOCK:
        if _shared_context is None:
            _shared_context = jax_compat.make_ir_context()
            _shared_context_bytes = 0
        context = _shared_context
        _shared_context_bytes += len(code)
        # MLIR reports why a parse failed through diagnostics (printed to stderr by default);
        # collect them into the error the user sees instead.
        diagnostics: list[str] = []

        def collect(diagnostic) -> bool:
            diagnostics.append(f"{diagnostic.location}: {diagnostic.message}")
            return True

        handler = context.attach_diagnostic_handler(collect)
        try:
            with context, ir.Location.unknown():
                module = None
                errors = []
                if isinstance(code, (bytes, bytearray)):
                    try:
                        module = stablehlo.deserialize_portable_artifact(context, bytes(code))
                    except Exception as exc:  # jaxlib raises plain Exceptions
                        errors.append(f"as a StableHLO portable artifact: {exc}")
                if module is None:
                    try:
                        module = ir.Module.parse(code)
                    except Exception as exc:
                        errors.append(f"as MLIR: {str(exc).splitlines()[0]}")
                if module is None:
                    details = "; ".join([*errors, *dict.fromkeys(diagnostics)])
                    raise InvalidArgument(
                        f"could not parse the program ({details[:2000]}). Expected a StableHLO "
                        f"portable artifact, MLIR bytecode or MLIR text as produced by JAX.")
                return _Walker().program(module)
        finally:
            handler.detach()
            if _shared_context_bytes >= CONTEXT_REUSE_BYTES:
                _shared_context = None  # freed with the last module that references it


class _Walker:
    """One walk over one module. MLIR uniques types and locations within a context, so each
    distinct one is decoded once per walk (looked up by identity, as MLIR compares them)."""

    def __init__(self):
        from jaxlib.mlir import ir
        self.ir = ir
        self.values: dict[Any, Value] = {}
        self.next_id = 0
        self.types: dict[Any, TensorType | TokenType | TupleType] = {}
        self.locations: dict[Any, str] = {}
        self.decoders = _attribute_decoders()

    # -- values and types ---------------------------------------------------------------------
    def decode_type(self, t):
        try:
            return self.types[t]
        except KeyError:
            pass
        decoded = self.types[t] = self._decode_type(t)  # errors are not cached: raised each time
        return decoded

    def _decode_type(self, t):
        ir = self.ir
        if _is(t, ir.RankedTensorType):
            rt = ir.RankedTensorType(t)
            if any(d < 0 for d in rt.shape):
                raise Unimplemented(f"dynamic shape {t} is not supported")
            return TensorType(tuple(rt.shape), element_dtype(rt.element_type))
        text = str(t)
        if text == "!stablehlo.token":
            return TokenType()
        if _is(t, ir.TupleType):
            tt = ir.TupleType(t)
            return TupleType(tuple(self.decode_type(tt.get_type(i)) for i in range(tt.num_types)))
        raise Unimplemented(f"type {text} is not supported")

    def value(self, mlir_value) -> Value:
        v = self.values.get(mlir_value)
        if v is None:  # first sight (most values: the definition comes before the uses)
            v = Value(self.next_id, self.decode_type(mlir_value.type))
            self.next_id += 1
            self.values[mlir_value] = v
        return v

    def location(self, location) -> str:
        key = location.attr
        try:
            return self.locations[key]
        except KeyError:
            text = self.locations[key] = _short_location(location)
            return text

    # -- structure ------------------------------------------------------------------------------
    def program(self, module) -> Program:
        functions: dict[str, Function] = {}
        entry = None
        for op in module.body.operations:
            if op.operation.name != "func.func":
                continue  # sdy.mesh and friends are read as module-level attributes below
            fn = self.function(op)
            functions[fn.name] = fn
            if fn.name == "main" or (entry is None and fn.visibility == "public"):
                entry = fn.name
        if entry is None:
            raise InvalidArgument("the program has no public function to run (expected @main)")
        attrs = self.attributes(module.operation.attributes)
        meshes = {}
        for op in module.body.operations:
            if op.operation.name == "sdy.mesh":
                o = op.operation
                meshes[self.attribute(o.attributes["sym_name"])] = str(o.attributes["mesh"])
        if meshes:
            attrs["sdy.meshes"] = meshes
        return Program(functions, entry, attrs)

    def function(self, op) -> Function:
        o = op.operation
        attrs = o.attributes
        name = self.attribute(attrs["sym_name"])
        visibility = self.attribute(attrs["sym_visibility"]) if "sym_visibility" in attrs else "public"
        region = self.region(o.regions[0])
        ftype = self.ir.FunctionType(self.ir.TypeAttr(attrs["function_type"]).value)
        result_types = tuple(self.decode_type(t) for t in ftype.results)
        arg_attrs = self._per_position(attrs, "arg_attrs", len(region.entry.arguments))
        res_attrs = self._per_position(attrs, "res_attrs", len(result_types))
        return Function(name, region.entry.arguments, result_types, region, arg_attrs, res_attrs,
                        visibility)

    def _per_position(self, attrs, key, n) -> tuple[dict[str, Any], ...]:
        if key not in attrs:
            return tuple({} for _ in range(n))
        return tuple(dict(self.attribute(d)) for d in self.ir.ArrayAttr(attrs[key]))

    def region(self, region) -> Region:
        return Region([self.block(b) for b in region.blocks])

    def block(self, block) -> Block:
        args = tuple([self.value(a) for a in block.arguments])
        op = self.op
        return Block(args, [op(o) for o in block.operations])

    def op(self, op) -> Op:
        o = op.operation
        value = self.value
        # in this order: value ids are handed out operands, results, then region arguments
        operands = tuple([value(v) for v in o.operands])
        results = tuple([value(v) for v in o.results])
        attributes = self.attributes(o.attributes)
        regions = o.regions
        return Op(o.name, operands, results, attributes,
                  tuple([self.region(r) for r in regions]) if len(regions) else (),
                  self.location(o.location))

    # -- attributes -----------------------------------------------------------------------------
    def attributes(self, attrs) -> dict[str, Any]:
        out = {}
        decoder_for = self.decoders.decoder_for
        for i in range(len(attrs)):
            named = attrs[i]
            attr = named.attr
            out[named.name] = decoder_for(attr)(self, attr)
        return out

    def attribute(self, attr) -> Any:
        return self.decoders.decoder_for(attr)(self, attr)


def _attribute_decoders() -> "_AttributeDecoders":
    global _DECODERS
    if _DECODERS is None:
        _DECODERS = _AttributeDecoders()
    return _DECODERS


_DECODERS = None


class _AttributeDecoders:
    """Which decoder reads an attribute: the first entry of ``chain`` whose class the attribute
    is. Asking every class in turn costs tens of microseconds per attribute, so two shortcuts
    give the same answer:

    - builtin attributes come back from jaxlib downcast to their Python class, and that class
      alone decides (``by_class``; an IntegerAttr still asks whether it is a BoolAttr first);
    - dialect attributes come back as plain ``ir.Attribute``; the stablehlo classes recognise
      them by TypeID alone, so the decoder found for one is remembered for its TypeID.
    """

    def __init__(self):
        from jaxlib.mlir import ir
        from jaxlib.mlir.dialects import stablehlo as S

        self.attribute_class = ir.Attribute
        enums = (S.ComparisonDirectionAttr, S.ComparisonTypeAttr, S.PrecisionAttr,
                 S.RngAlgorithmAttr, S.FftTypeAttr, S.TransposeAttr, S.RngDistributionAttr)
        dialect = [*((cls, _enum_decoder(cls)) for cls in enums),
                   (S.DotDimensionNumbers, _decode_dot_dimension_numbers),
                   (S.ConvDimensionNumbers, _decode_conv_dimension_numbers),
                   (S.GatherDimensionNumbers, _decode_gather_dimension_numbers),
                   (S.ScatterDimensionNumbers, _decode_scatter_dimension_numbers),
                   (S.OutputOperandAlias, _decode_output_operand_alias)]
        builtin = [
            (ir.DenseElementsAttr, _decode_dense_elements),
            (ir.DenseI64ArrayAttr, _sequence_decoder(ir.DenseI64ArrayAttr, int)),
            (ir.DenseI32ArrayAttr, _sequence_decoder(ir.DenseI32ArrayAttr, int)),
            (ir.DenseI16ArrayAttr, _sequence_decoder(ir.DenseI16ArrayAttr, int)),
            (ir.DenseI8ArrayAttr, _sequence_decoder(ir.DenseI8ArrayAttr, int)),
            (ir.DenseBoolArrayAttr, _sequence_decoder(ir.DenseBoolArrayAttr, bool)),
            (ir.DenseF32ArrayAttr, _sequence_decoder(ir.DenseF32ArrayAttr, float)),
            (ir.DenseF64ArrayAttr, _sequence_decoder(ir.DenseF64ArrayAttr, float)),
            (ir.BoolAttr, _decode_bool),
            (ir.IntegerAttr, _decode_integer),
            (ir.FloatAttr, _decode_float),
            (ir.StringAttr, _decode_string),
            (ir.FlatSymbolRefAttr, _decode_symbol),
            (ir.ArrayAttr, _decode_array),
            (ir.DictAttr, _decode_dict),
            (ir.TypeAttr, _decode_type_attribute),
            (ir.UnitAttr, _decode_unit),
        ]
        self.chain = [*builtin, *dialect]
        self.by_class = dict(builtin)
        # Subclasses jaxlib downcasts to; an i1 IntegerAttr is a BoolAttr, asked first.
        self.by_class.update({ir.DenseIntElementsAttr: _decode_dense_elements,
                              ir.DenseFPElementsAttr: _decode_dense_elements,
                              ir.IntegerAttr: _decode_bool_or_integer})
        self.dialect_decoders = frozenset(decode for _, decode in dialect)
        self.by_typeid: dict[Any, Any] = {}

    def decoder_for(self, attr):
        cls = type(attr)
        decode = self.by_class.get(cls)
        if decode is not None:
            return decode
        if cls is not self.attribute_class:
            return self.search(attr)
        typeid = attr.typeid
        decode = self.by_typeid.get(typeid)
        if decode is None:
            decode = self.search(attr)
            if decode in self.dialect_decoders:
                self.by_typeid[typeid] = decode
        return decode

    def search(self, attr):
        """The first decoder of ``chain`` whose class ``attr`` is (the definition)."""
        for cls, decode in self.chain:
            if _is(attr, cls):
                return decode
        return _decode_opaque


def _sequence_decoder(cls, element):
    def decode(walker, attr):
        return tuple(element(x) for x in cls(attr))
    return decode


def _enum_decoder(cls):
    def decode(walker, attr):
        return str(cls(attr).value)
    return decode


def _decode_dense_elements(walker, attr):
    return _dense_to_numpy(attr, walker)


def _decode_bool(walker, attr):
    return bool(walker.ir.BoolAttr(attr).value)


def _decode_integer(walker, attr):
    return int(walker.ir.IntegerAttr(attr).value)


def _decode_bool_or_integer(walker, attr):
    if _is(attr, walker.ir.BoolAttr):
        return _decode_bool(walker, attr)
    return _decode_integer(walker, attr)


def _decode_float(walker, attr):
    return float(walker.ir.FloatAttr(attr).value)


def _decode_string(walker, attr):
    return walker.ir.StringAttr(attr).value


def _decode_symbol(walker, attr):
    return walker.ir.FlatSymbolRefAttr(attr).value


def _decode_array(walker, attr):
    return tuple(walker.attribute(a) for a in walker.ir.ArrayAttr(attr))


def _decode_dict(walker, attr):
    return walker.attributes(walker.ir.DictAttr(attr))


def _decode_type_attribute(walker, attr):
    try:
        return walker.decode_type(walker.ir.TypeAttr(attr).value)
    except Unimplemented:
        return A.OpaqueAttribute(str(attr))


def _decode_unit(walker, attr):
    return True


def _decode_opaque(walker, attr):
    return A.OpaqueAttribute(str(attr))


def _decode_dot_dimension_numbers(walker, attr):
    from jaxlib.mlir.dialects import stablehlo as S
    a = S.DotDimensionNumbers(attr)
    return A.DotDimensionNumbers(
        tuple(a.lhs_batching_dimensions), tuple(a.rhs_batching_dimensions),
        tuple(a.lhs_contracting_dimensions), tuple(a.rhs_contracting_dimensions))


def _decode_conv_dimension_numbers(walker, attr):
    from jaxlib.mlir.dialects import stablehlo as S
    a = S.ConvDimensionNumbers(attr)
    return A.ConvDimensionNumbers(
        a.input_batch_dimension, a.input_feature_dimension,
        tuple(a.input_spatial_dimensions), a.kernel_input_feature_dimension,
        a.kernel_output_feature_dimension, tuple(a.kernel_spatial_dimensions),
        a.output_batch_dimension, a.output_feature_dimension,
        tuple(a.output_spatial_dimensions))


def _decode_gather_dimension_numbers(walker, attr):
    from jaxlib.mlir.dialects import stablehlo as S
    a = S.GatherDimensionNumbers(attr)
    return A.GatherDimensionNumbers(
        tuple(a.offset_dims), tuple(a.collapsed_slice_dims),
        tuple(a.operand_batching_dims), tuple(a.start_indices_batching_dims),
        tuple(a.start_index_map), a.index_vector_dim)


def _decode_scatter_dimension_numbers(walker, attr):
    from jaxlib.mlir.dialects import stablehlo as S
    a = S.ScatterDimensionNumbers(attr)
    return A.ScatterDimensionNumbers(
        tuple(a.update_window_dims), tuple(a.inserted_window_dims),
        tuple(a.input_batching_dims), tuple(a.scatter_indices_batching_dims),
        tuple(a.scattered_dims_to_operand_dims), a.index_vector_dim)


def _decode_output_operand_alias(walker, attr):
    from jaxlib.mlir.dialects import stablehlo as S
    a = S.OutputOperandAlias(attr)
    return A.OutputOperandAlias(tuple(a.output_tuple_indices), a.operand_index,
                                tuple(a.operand_tuple_indices))


def _is(obj, cls) -> bool:
    """Builtin MLIR classes are downcast automatically; dialect attributes answer isinstance()."""
    if isinstance(obj, cls):
        return True
    check = getattr(cls, "isinstance", None)
    return bool(check and check(obj))


def _dense_to_numpy(attr, walker: _Walker) -> np.ndarray:
    t = walker.ir.ShapedType(attr.type)
    dtype = element_dtype(t.element_type)
    shape = tuple(t.shape)
    if attr.is_splat:
        scalar = _splat_value(attr.get_splat_value(), dtype, walker)
        return np.full(shape, scalar, dtype=dtype)
    if dtype == np.bool_:
        # i1 data is bit-packed in the raw buffer; go element by element through the attribute.
        return np.array([bool(x) for x in _iter_elements(attr, walker)], dtype=dtype).reshape(shape)
    raw = np.frombuffer(bytes(memoryview(attr)), dtype=np.uint8) if _has_buffer(attr) else None
    if raw is not None and raw.size == dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
        return raw.view(dtype).reshape(shape).copy()
    try:
        elements = _iter_elements(attr, walker)
    except _HexConstant as hex_constant:
        return np.frombuffer(hex_constant.data, dtype=dtype).reshape(shape).copy()
    if elements and isinstance(elements[0], _Token):
        return _materialise(elements, dtype, shape)
    return np.array(elements, dtype=dtype).reshape(shape)


def _has_buffer(attr) -> bool:
    try:
        memoryview(attr)
        return True
    except (TypeError, BufferError):
        return False


def _iter_elements(attr, walker):
    ir = walker.ir
    if isinstance(attr, ir.DenseIntElementsAttr):
        return [attr[i] for i in range(len(attr))]
    try:
        return [attr[i] for i in range(len(attr))]
    except TypeError:
        pass  # bf16/f8 elements have no Python accessor; read the printed form below
    return _elements_from_text(str(attr))


_TOKEN = re.compile(r'0x[0-9A-Fa-f]+|[-+]?(?:inf|nan)|[-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?|true|false')


def _elements_from_text(text: str):
    body = text[text.index("<") + 1: text.rindex(">")]
    body = body.rsplit(":", 1)[0] if "dense<" not in body else body
    if body.startswith('"0x'):
        raise _HexConstant(bytes.fromhex(body[3:body.index('"', 1)]))
    return [_Token(t) for t in _TOKEN.findall(body.split(">")[0])]


class _HexConstant(Exception):
    def __init__(self, data: bytes):
        self.data = data


class _Token(str):
    """A printed element; hex tokens are bit patterns of the element type."""


def _materialise(tokens, dtype: np.dtype, shape) -> np.ndarray:
    out = np.empty(len(tokens), dtype=dtype)
    bits = out.view(np.dtype(f"u{dtype.itemsize}")) if dtype.itemsize in (1, 2, 4, 8) else None
    for i, tok in enumerate(tokens):
        if isinstance(tok, _Token) and tok.startswith("0x") and bits is not None:
            bits[i] = int(tok, 16)
        elif tok in ("true", "false"):
            out[i] = tok == "true"
        else:
            out[i] = float(tok) if dtype.kind in "fcV" or dtype.name.startswith(("bfloat", "float")) else int(tok)
    return out.reshape(shape)


def _splat_value(value_attr, dtype, walker):
    ir = walker.ir
    if _is(value_attr, ir.BoolAttr):
        return bool(ir.BoolAttr(value_attr).value)
    if _is(value_attr, ir.IntegerAttr):
        v = int(ir.IntegerAttr(value_attr).value)
        if dtype == np.bool_:
            return bool(v)
        if dtype.kind == "u" and v < 0:
            v += 1 << (8 * dtype.itemsize)
        return v
    if _is(value_attr, ir.FloatAttr):
        return float(ir.FloatAttr(value_attr).value)
    text = str(value_attr)
    # complex splats print as `(re, im)`
    raise Unimplemented(f"splat constant {text[:200]} of dtype {dtype} cannot be decoded")


def _short_location(location) -> str:
    text = str(location)
    if text.startswith("loc(") and text.endswith(")"):
        text = text[4:-1]
    return text[:160] if text != "unknown" else ""
