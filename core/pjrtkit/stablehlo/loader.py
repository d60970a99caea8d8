"""Load a StableHLO program (portable artifact, MLIR bytecode or text) into the plain IR.

jaxlib's own MLIR bindings do the parsing; this module only walks the parsed module once and
decodes every attribute (``pjrtkit.stablehlo.attribute_decoding``; the table in
``pjrtkit.stablehlo.attributes``). After ``load_program``
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
from pjrtkit.stablehlo.attribute_decoding import (attribute_decoders, decode_printed,
                                                  decoded_meshes, isa, named_attribute_text,
                                                  split_top_level)
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
        self.decoders = attribute_decoders()
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
        if isa(t, ir.RankedTensorType):
            rt = ir.RankedTensorType(t)
            if any(d < 0 for d in rt.shape):
                raise Unimplemented(f"dynamic shape {t} is not supported")
            return TensorType(tuple(rt.shape), element_dtype(rt.element_type))
        text = str(t)
        if text == "!stablehlo.token":
            return TokenType()
        if isa(t, ir.TupleType):
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
        self.meshes = decoded_meshes(module)  # before the functions: collectives name them
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
                out[name] = decode_printed(named_attribute_text(str(named), name))
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
                out.append(decode_printed(texts[i]) if i < len(texts) else
                           A.OpaqueAttribute(str(array)[:200]))
                continue
            out.append(self.attribute(element))
        return tuple(out)

    def attribute(self, attr) -> Any:
        return self.decoders.decoder_for(attr)(self, attr)


def _short_location(location) -> str:
    text = str(location)
    if text.startswith("loc(") and text.endswith(")"):
        text = text[4:-1]
    return text[:160] if text != "unknown" else ""
