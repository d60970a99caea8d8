"""Load a StableHLO program (portable artifact, MLIR bytecode or text) into the plain IR.

jaxlib's own MLIR bindings do the parsing; this module only walks the parsed module once and
decodes every attribute (table in ``pjrtkit.stablehlo.attributes``). After ``load_program``
returns, no MLIR object is referenced from the result.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any

import numpy as np

from pjrtkit.errors import InvalidArgument, Unimplemented
from pjrtkit.stablehlo import attributes as A
from pjrtkit.stablehlo import dense, isolation, one_device
from pjrtkit.stablehlo.entry_layouts import layout_modes_of
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


def element_dtype(element_type) -> np.dtype:
    """The NumPy dtype of an MLIR element type (a jaxlib ``ir.Type``)."""
    return dense.element_dtype(str(element_type))


def load_program(code: bytes | str, *, num_partitions: int | None = None,
                 num_replicas: int | None = None, isolated: bool = False) -> Program:
    """Parse ``code`` (portable artifact, MLIR bytecode or MLIR text) and build a Program.

    ``num_partitions`` and ``num_replicas`` are what the program is compiled for
    (CompileOptions); None reads the module's ``mhlo.num_partitions`` / ``mhlo.num_replicas``
    (JAX always sets them). On one partition the program's sharding annotations are removed,
    and on one device its collectives over that device (``pjrtkit.stablehlo.one_device``).

    ``isolated`` parses in a child process (``pjrtkit.stablehlo.isolation``): the runtime
    does so for every program it compiles, as jaxlib's parser can abort on damaged input.

    Raises InvalidArgument when jaxlib cannot parse it (truncated or foreign bytes).
    """
    program = isolation.parse_isolated(code) if isolated else parse_program(code)
    if num_partitions is None:
        num_partitions = program.attributes.get("mhlo.num_partitions", 1)
    if num_replicas is None:
        num_replicas = program.attributes.get("mhlo.num_replicas", 1)
    if num_partitions == 1:
        one_device.resolve_for_one_device(program, one_replica=num_replicas == 1)
    return program


def parse_program(code: bytes | str) -> Program:
    """The program as jaxlib parses it, every op kept (``load_program`` without the passes)."""
    return _parsed(code, lambda module: _Walker().program(module))


# The argument attributes by which JAX marks a donated parameter.
DONATION_ATTRIBUTES = ("tf.aliasing_output", "jax.buffer_donor")
# The result attribute by which JAX places an output in a memory kind (out_shardings).
MEMORY_KIND_ATTRIBUTE = "mhlo.memory_kind"


@dataclasses.dataclass(frozen=True)
class EntryMarks:
    """What JAX marks on the entry function's parameters and results that XLA's partitioner
    drops from the per-device program it makes."""

    donated: frozenset[int]                        # parameters JAX donates
    result_memory_kinds: tuple[str | None, ...]    # each result's ``mhlo.memory_kind``
    parameter_layout_modes: tuple[str | None, ...] = ()  # ``mhlo.layout_mode``s (entry_layouts)
    result_layout_modes: tuple[str | None, ...] = ()


def entry_marks(code: bytes | str) -> EntryMarks:
    """The entry function's donation and result memory-kind marks, read without walking the
    whole program."""
    return _parsed(code, _entry_marks_of)


def _entry_marks_of(module) -> EntryMarks:
    from jaxlib.mlir import ir

    functions = [op.operation for op in module.body.operations
                 if op.operation.name == "func.func"]
    names = [ir.StringAttr(f.attributes["sym_name"]).value for f in functions]
    entry = functions[names.index("main")] if "main" in names else next(
        (f for f in functions if "sym_visibility" not in f.attributes
         or ir.StringAttr(f.attributes["sym_visibility"]).value == "public"), None)
    if entry is None:
        return EntryMarks(frozenset(), ())
    donated = set()
    if "arg_attrs" in entry.attributes:
        for position, attrs in enumerate(ir.ArrayAttr(entry.attributes["arg_attrs"])):
            attrs = ir.DictAttr(attrs)
            for name in DONATION_ATTRIBUTES:
                if name in attrs and not (isinstance(attrs[name], ir.BoolAttr)
                                          and not ir.BoolAttr(attrs[name]).value):
                    donated.add(position)
    kinds = []
    if "res_attrs" in entry.attributes:
        for attrs in ir.ArrayAttr(entry.attributes["res_attrs"]):
            attrs = ir.DictAttr(attrs)
            kinds.append(ir.StringAttr(attrs[MEMORY_KIND_ATTRIBUTE]).value
                         if MEMORY_KIND_ATTRIBUTE in attrs else None)
    return EntryMarks(frozenset(donated), tuple(kinds), layout_modes_of(entry, "arg_attrs"),
                      layout_modes_of(entry, "res_attrs"))


def warm_up() -> None:
    """Import what parsing needs and make the shared MLIR context now (about half a second:
    it imports JAX's MLIR layer), so that the first parse does not pay for it."""
    from pjrtkit import jax_compat

    global _shared_context, _shared_context_bytes
    with _LOCK:
        if _shared_context is None:
            _shared_context = jax_compat.make_ir_context()
            _shared_context_bytes = 0


def _parsed(code: bytes | str, read):
    """``read(module)`` of the module jaxlib parses from ``code``, under the loader's lock."""
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
            # An exception leaving this callback unwinds through C++ and aborts the process;
            # a damaged program's diagnostic may not even convert to str (not UTF-8).
            try:
                diagnostics.append(f"{diagnostic.location}: {diagnostic.message}")
            except (RuntimeError, UnicodeError, ValueError):
                diagnostics.append("(a diagnostic that is not valid text)")
            return True

        handler = context.attach_diagnostic_handler(collect)
        try:
            with context, ir.Location.unknown():
                module = None
                errors = []
                if _is_portable_artifact(code):
                    # Never also tried as plain MLIR: for a damaged artifact that parser's
                    # error carries the damaged bytes, and converting them to a Python
                    # string throws inside C++ (an abort).
                    try:
                        module = stablehlo.deserialize_portable_artifact(context, bytes(code))
                    except ValueError as exc:
                        errors.append(f"as a StableHLO portable artifact: {exc}")
                else:
                    try:
                        module = ir.Module.parse(_as_bytecode_or_text(code))
                    except (ir.MLIRError, ValueError) as exc:
                        errors.append(f"as MLIR: {' '.join(str(exc).split())}")
                if module is None:
                    details = "; ".join([*errors, *dict.fromkeys(diagnostics)])
                    raise InvalidArgument(
                        f"could not parse the program ({details[:2000]}). Expected a StableHLO "
                        f"portable artifact, MLIR bytecode or MLIR text as produced by JAX.")
                try:
                    return read(module)
                except RuntimeError as exc:
                    if "conversion error" not in str(exc):
                        raise
                    # jaxlib could not turn a name or string of the program into Python text
                    raise InvalidArgument(f"the program holds a name or string that is not "
                                          f"UTF-8 ({exc}); it is damaged or not a program JAX "
                                          f"produced") from None
        finally:
            handler.detach()
            if _shared_context_bytes >= CONTEXT_REUSE_BYTES:
                _shared_context = None  # freed with the last module that references it


_BYTECODE_MAGIC = b"ML\xefR"


def _is_portable_artifact(code) -> bool:
    """MLIR bytecode whose producer is StableHLO (``StableHLO_v1.13.7``): a portable artifact."""
    return (isinstance(code, (bytes, bytearray)) and code[:4] == _BYTECODE_MAGIC
            and b"StableHLO_v" in code[4:48])


def _as_bytecode_or_text(code):
    """MLIR bytecode as it is; anything else must be UTF-8 text (MLIR's error messages quote
    the input, and quoting bytes that are not UTF-8 aborts the process)."""
    if isinstance(code, str) or code[:4] == _BYTECODE_MAGIC:
        return code
    try:
        return bytes(code).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"could not parse the program: it is neither MLIR bytecode nor "
                              f"UTF-8 text (byte {exc.start} is {bytes(code)[exc.start]:#04x}). "
                              f"Expected a StableHLO portable artifact, MLIR bytecode or MLIR "
                              f"text as produced by JAX.") from None


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
        self.meshes: dict[str, A.Mesh] = {}

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
        self.meshes = _decoded_meshes(module)  # before the functions: collectives name them
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
        visibility = (self.attribute(attrs["sym_visibility"]) if "sym_visibility" in attrs
                      else "public")
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
        decoded = self.array_elements(self.ir.ArrayAttr(attrs[key]))
        if len(decoded) != n or not all(isinstance(d, dict) for d in decoded):
            raise InvalidArgument(f"{key} holds {len(decoded)} entries for {n} positions")
        return decoded

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
        """Decode an op's attribute map or a DictAttr.

        Each attribute is fetched by name, never through ``NamedAttribute.attr``: for an
        attribute jaxlib cannot hand to Python (a complex constant) that property raises inside
        C++ and aborts the process, while lookup by name raises a TypeError we can catch; such
        an attribute is decoded from its printed form instead.
        """
        out = {}
        decoder_for = self.decoders.decoder_for
        for i in range(len(attrs)):
            named = attrs[i]
            name = named.name
            try:
                attr = attrs[name]
            except (TypeError, ValueError):  # jaxlib's cast to a Python class failed
                out[name] = _decode_printed(_named_attribute_text(str(named), name))
                continue
            out[name] = decoder_for(attr)(self, attr)
        return out

    def array_elements(self, array) -> tuple[Any, ...]:
        """Decode every element of an ArrayAttr, each fetched by index (see ``attributes``)."""
        out = []
        texts = None
        for i in range(len(array)):
            try:
                element = array[i]
            except (TypeError, ValueError):  # an element jaxlib cannot hand to Python
                if texts is None:
                    texts = split_top_level(str(array)[1:-1])
                out.append(_decode_printed(texts[i]) if i < len(texts) else
                           A.OpaqueAttribute(str(array)[:200]))
                continue
            out.append(self.attribute(element))
        return tuple(out)

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


def _decoded_meshes(module) -> dict[str, A.Mesh]:
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
    if _is(a.mesh, walker.ir.FlatSymbolRefAttr):
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


def _is(obj, cls) -> bool:
    """Builtin MLIR classes are downcast automatically; dialect attributes answer isinstance()."""
    if isinstance(obj, cls):
        return True
    check = getattr(cls, "isinstance", None)
    return bool(check and check(obj))


def _dense_to_numpy(attr, walker: _Walker) -> np.ndarray:
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


def _decode_printed(text: str) -> Any:
    """An attribute jaxlib could not hand to Python, from its printed form: dense constants
    are decoded; anything else is kept as text."""
    if text.startswith("dense<"):
        return dense.from_text(text)
    return A.OpaqueAttribute(text)


def _named_attribute_text(text: str, name: str) -> str:
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


def _short_location(location) -> str:
    text = str(location)
    if text.startswith("loc(") and text.endswith(")"):
        text = text[4:-1]
    return text[:160] if text != "unknown" else ""
