"""Decoding MLIR attributes into the plain IR's values (``pjrtkit.stablehlo.attributes``), for
the loader's walk over a parsed module (``pjrtkit.stablehlo.loader``).

Each decoder is ``decode(walker, attr)``; ``walker`` is the loader's walk of one module, which
the decoders use for its ``ir`` module, its ``meshes`` and to decode nested attributes and
types. ``attribute_decoders()`` picks the decoder of an attribute (once per attribute class or
dialect TypeID). Attributes jaxlib's bindings do not expose are decoded from their printed
form (``decode_printed``, ``split_top_level``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from pjrtkit.errors import InvalidArgument, Unimplemented
from pjrtkit.stablehlo import attributes as A
from pjrtkit.stablehlo import dense


def attribute_decoders() -> "AttributeDecoders":
    global _DECODERS
    if _DECODERS is None:
        _DECODERS = AttributeDecoders()
    return _DECODERS


_DECODERS = None


class AttributeDecoders:
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
                   (S.OutputOperandAlias, _decode_output_operand_alias),
                   (S.ReplicaGroupMeshAxesAttr, _decode_mesh_axes_replica_groups)]
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
            if isa(attr, cls):
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
    return dense_to_numpy(attr, walker)


def _decode_bool(walker, attr):
    return bool(walker.ir.BoolAttr(attr).value)


def _decode_integer(walker, attr):
    return int(walker.ir.IntegerAttr(attr).value)


def _decode_bool_or_integer(walker, attr):
    if isa(attr, walker.ir.BoolAttr):
        return _decode_bool(walker, attr)
    return _decode_integer(walker, attr)


def _decode_float(walker, attr):
    return float(walker.ir.FloatAttr(attr).value)


def _decode_string(walker, attr):
    # Read as bytes: a string attribute may be a binary payload (Pallas's Triton kernels carry
    # MLIR bytecode in one), and reading that as text fails inside jaxlib.
    raw = walker.ir.StringAttr(attr).value_bytes
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _decode_symbol(walker, attr):
    return walker.ir.FlatSymbolRefAttr(attr).value


def _decode_array(walker, attr):
    return walker.array_elements(walker.ir.ArrayAttr(attr))


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


def decoded_meshes(module) -> dict[str, A.Mesh]:
    """The module's ``sdy.mesh`` symbols, decoded (a mesh the bindings cannot read is left
    out: only a collective naming it needs it, and that one then fails naming the symbol)."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import sdy

    meshes = {}
    for op in module.body.operations:
        o = op.operation
        if o.name != "sdy.mesh":
            continue
        try:
            mesh = sdy.MeshAttr(o.attributes["mesh"])
            meshes[ir.StringAttr(o.attributes["sym_name"]).value] = A.Mesh(
                tuple(A.MeshAxis(str(a.name), int(a.size))
                      for a in (sdy.MeshAxisAttr(x) for x in mesh.axes)),
                tuple(int(i) for i in mesh.device_ids))
        except (TypeError, ValueError, KeyError):
            continue
    return meshes


def _decode_mesh_axes_replica_groups(walker, attr):
    from jaxlib.mlir.dialects import stablehlo as S
    a = S.ReplicaGroupMeshAxesAttr(attr)
    if isa(a.mesh, walker.ir.FlatSymbolRefAttr):
        name = walker.ir.FlatSymbolRefAttr(a.mesh).value
        mesh = walker.meshes.get(name)
        if mesh is None:
            raise InvalidArgument(f"replica groups {attr} name the mesh @{name}, which the "
                                  "program does not define with sdy.mesh")
    else:
        inline = S.MeshAttr(a.mesh)
        mesh = A.Mesh(tuple(A.MeshAxis(str(x.name), int(x.size))
                            for x in (S.MeshAxisAttr(m) for m in inline.axes)),
                      tuple(int(i) for i in (inline.device_ids or ())))
    axes = []
    for element in a.axes:
        ref = S.AxisRefAttr(element)
        info = ref.sub_axis_info
        if info is None:
            axes.append(A.AxisRef(str(ref.name)))
        else:
            info = S.SubAxisInfoAttr(info)
            axes.append(A.AxisRef(str(ref.name), int(info.pre_size), int(info.size)))
    return A.MeshAxesReplicaGroups(mesh, tuple(axes))


def isa(obj, cls) -> bool:
    """Builtin MLIR classes are downcast automatically; dialect attributes answer isinstance()."""
    if isinstance(obj, cls):
        return True
    check = getattr(cls, "isinstance", None)
    return bool(check and check(obj))


def dense_to_numpy(attr, walker: Any) -> np.ndarray:
    """Raw storage through the buffer protocol where jaxlib offers it (it checks the format),
    the printed form otherwise (bf16, fp8, int4, ...). Never an element accessor."""
    shaped = walker.ir.ShapedType(attr.type)
    shape = tuple(shaped.shape)
    element = str(shaped.element_type)
    if element == "index":
        # Layout attributes XLA writes (result_layout, operand_layouts): 64-bit integers.
        return dense.from_text(str(attr).replace("index>", "i64>"))
    dtype = dense.element_dtype(element)
    try:
        view = memoryview(attr)
    except (TypeError, BufferError, ValueError):
        view = None
    if view is not None and view.itemsize == dtype.itemsize and element != "f4E2M1FN":
        raw = view.tobytes()
        if len(raw) == dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
            return dense.from_storage(raw, element, shape)
    return dense.from_text(str(attr))


def decode_printed(text: str) -> Any:
    """An attribute jaxlib could not hand to Python, from its printed form: dense constants
    are decoded; anything else is kept as text."""
    if text.startswith("dense<"):
        return dense.from_text(text)
    return A.OpaqueAttribute(text)


def named_attribute_text(text: str, name: str) -> str:
    """``NamedAttribute(name=VALUE)`` -> ``VALUE``."""
    for spelled in (name, f'"{name}"'):
        prefix = f"NamedAttribute({spelled}="
        if text.startswith(prefix) and text.endswith(")"):
            return text[len(prefix):-1]
    return text


_OPENERS = {"(": ")", "[": "]", "{": "}", "<": ">"}


def split_top_level(text: str) -> list[str]:
    """Split printed attributes at the commas outside brackets and strings."""
    parts, depth, start, quoted, i = [], [], 0, False, 0
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c in _OPENERS:
            depth.append(_OPENERS[c])
        elif depth and c == depth[-1]:
            depth.pop()
        elif c == "," and not depth:
            parts.append(text[start:i].strip())
            start = i + 1
        i += 1
    tail = text[start:].strip()
    if tail or parts:
        parts.append(tail)
    return parts
