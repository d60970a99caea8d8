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
    from jax._src.interpreters import mlir as jax_mlir
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    with _LOCK:
        context = jax_mlir.make_ir_context()
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


class _Walker:
    def __init__(self):
        from jaxlib.mlir import ir
        self.ir = ir
        self.values: dict[Any, Value] = {}
        self.next_id = 0

    # -- values and types ---------------------------------------------------------------------
    def decode_type(self, t):
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
        try:
            return self.values[mlir_value]
        except KeyError:
            v = Value(self.next_id, self.decode_type(mlir_value.type))
            self.next_id += 1
            self.values[mlir_value] = v
            return v

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
        args = tuple(self.value(a) for a in block.arguments)
        return Block(args, [self.op(op) for op in block.operations])

    def op(self, op) -> Op:
        o = op.operation
        return Op(
            name=o.name,
            operands=tuple(self.value(v) for v in o.operands),
            results=tuple(self.value(v) for v in o.results),
            attributes=self.attributes(o.attributes),
            regions=tuple(self.region(r) for r in o.regions),
            location=_short_location(o.location),
        )

    # -- attributes -----------------------------------------------------------------------------
    def attributes(self, attrs) -> dict[str, Any]:
        out = {}
        for i in range(len(attrs)):
            named = attrs[i]
            out[named.name] = self.attribute(named.attr)
        return out

    def attribute(self, attr) -> Any:
        ir = self.ir
        from jaxlib.mlir.dialects import stablehlo as S

        if _is(attr, ir.DenseElementsAttr):
            return _dense_to_numpy(attr, self)
        for cls in (ir.DenseI64ArrayAttr, ir.DenseI32ArrayAttr, ir.DenseI16ArrayAttr,
                    ir.DenseI8ArrayAttr):
            if _is(attr, cls):
                return tuple(int(x) for x in cls(attr))
        if _is(attr, ir.DenseBoolArrayAttr):
            return tuple(bool(x) for x in ir.DenseBoolArrayAttr(attr))
        if _is(attr, ir.DenseF32ArrayAttr) or _is(attr, ir.DenseF64ArrayAttr):
            cls = ir.DenseF32ArrayAttr if _is(attr, ir.DenseF32ArrayAttr) else ir.DenseF64ArrayAttr
            return tuple(float(x) for x in cls(attr))
        if _is(attr, ir.BoolAttr):
            return bool(ir.BoolAttr(attr).value)
        if _is(attr, ir.IntegerAttr):
            return int(ir.IntegerAttr(attr).value)
        if _is(attr, ir.FloatAttr):
            return float(ir.FloatAttr(attr).value)
        if _is(attr, ir.StringAttr):
            return ir.StringAttr(attr).value
        if _is(attr, ir.FlatSymbolRefAttr):
            return ir.FlatSymbolRefAttr(attr).value
        if _is(attr, ir.ArrayAttr):
            return tuple(self.attribute(a) for a in ir.ArrayAttr(attr))
        if _is(attr, ir.DictAttr):
            return self.attributes(ir.DictAttr(attr))
        if _is(attr, ir.TypeAttr):
            try:
                return self.decode_type(ir.TypeAttr(attr).value)
            except Unimplemented:
                return A.OpaqueAttribute(str(attr))
        if _is(attr, ir.UnitAttr):
            return True
        for cls in (S.ComparisonDirectionAttr, S.ComparisonTypeAttr, S.PrecisionAttr,
                    S.RngAlgorithmAttr, S.FftTypeAttr, S.TransposeAttr, S.RngDistributionAttr):
            if _is(attr, cls):
                return str(cls(attr).value)
        if _is(attr, S.DotDimensionNumbers):
            a = S.DotDimensionNumbers(attr)
            return A.DotDimensionNumbers(
                tuple(a.lhs_batching_dimensions), tuple(a.rhs_batching_dimensions),
                tuple(a.lhs_contracting_dimensions), tuple(a.rhs_contracting_dimensions))
        if _is(attr, S.ConvDimensionNumbers):
            a = S.ConvDimensionNumbers(attr)
            return A.ConvDimensionNumbers(
                a.input_batch_dimension, a.input_feature_dimension,
                tuple(a.input_spatial_dimensions), a.kernel_input_feature_dimension,
                a.kernel_output_feature_dimension, tuple(a.kernel_spatial_dimensions),
                a.output_batch_dimension, a.output_feature_dimension,
                tuple(a.output_spatial_dimensions))
        if _is(attr, S.GatherDimensionNumbers):
            a = S.GatherDimensionNumbers(attr)
            return A.GatherDimensionNumbers(
                tuple(a.offset_dims), tuple(a.collapsed_slice_dims),
                tuple(a.operand_batching_dims), tuple(a.start_indices_batching_dims),
                tuple(a.start_index_map), a.index_vector_dim)
        if _is(attr, S.ScatterDimensionNumbers):
            a = S.ScatterDimensionNumbers(attr)
            return A.ScatterDimensionNumbers(
                tuple(a.update_window_dims), tuple(a.inserted_window_dims),
                tuple(a.input_batching_dims), tuple(a.scatter_indices_batching_dims),
                tuple(a.scattered_dims_to_operand_dims), a.index_vector_dim)
        if _is(attr, S.OutputOperandAlias):
            a = S.OutputOperandAlias(attr)
            return A.OutputOperandAlias(tuple(a.output_tuple_indices), a.operand_index,
                                        tuple(a.operand_tuple_indices))
        return A.OpaqueAttribute(str(attr))


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
