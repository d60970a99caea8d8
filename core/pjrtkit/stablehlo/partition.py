"""Partitioning: a program compiled for several partitions becomes the program each device runs.

JAX hands a backend ONE global program for a sharded ``jit``, a ``shard_map`` or a ``pmap``
(CompileOptions ``num_partitions = N``, Shardy annotations). XLA's own SPMD partitioner turns
it into the per-device program (per-device shapes, ``partition_id``, collectives with dense
replica groups): the program is compiled on a private in-process XLA:CPU client with XLA's HLO
dump after the ``spmd-partitioning`` pass switched on, and that dump is converted back to
StableHLO (``pjrtkit.jax_compat`` holds those private calls). Shardy's own MLIR passes are not
used: in this jaxlib they return wrong numbers for max/min reductions without an error, and
abort on some programs (../shared/MANY_DEVICES.md).

The result is the per-device program, so every plugin sees an ordinary program whose
collectives it lowers like any other op; the module keeps XLA's ``mhlo.spmd_output_sharding``
and ``mhlo.spmd_parameters_shardings``, which jaxlib reads back from
PJRT_Executable_OptimizedProgram to learn how outputs and parameters are sharded.

``partitioned_program`` caches by (program bytes, options bytes): a second compile of the
same program costs an unpickle of the parsed per-device program. The runtime partitions and
parses in the parser's child process (``isolation``), so an XLA abort on a strange program
cannot take the user's process down; except a program whose partitioning calls back into this
process's Python (``calls_python_while_partitioning``: ``inspect_array_sharding``,
``custom_partitioning``), which is partitioned here: the callbacks are the user's objects, with
the user's side effects, and exist only in this process (ARCHITECTURE.md, "Many devices").
"""
from __future__ import annotations

import glob
import hashlib
import os
import pickle
import shutil
import tempfile
import threading
import time
from collections import OrderedDict

from pjrtkit.errors import Internal, InvalidArgument, PjrtError
from pjrtkit.stablehlo.ir import (Op, Program, Region, TupleType, Value, fresh_value,
                                  rename_reads, walk_ops)

# Parsed per-device programs kept (pickled, so each compile gets its own copy to rewrite).
CACHE_ENTRIES = 256

_cache: OrderedDict[bytes, tuple[bytes, bytes]] = OrderedDict()
_cache_lock = threading.Lock()
_seconds_partitioning = 0.0  # wall time of cache misses, this process


def partitioning_seconds() -> float:
    """Wall-clock seconds this process has spent partitioning programs (cache misses only:
    XLA's partitioner, the conversion back to StableHLO and the parse). What a benchmark
    reports as the one-time partitioning cost of a program is the growth of this number
    across its first compile."""
    return _seconds_partitioning


def cache_entries() -> int:
    """Per-device programs kept now (at most ``CACHE_ENTRIES``)."""
    with _cache_lock:
        return len(_cache)


def partitioned_program(code: bytes, compile_options: bytes, *, num_replicas: int,
                        num_partitions: int, isolated: bool) -> tuple[Program, bytes]:
    """(per-device Program, its StableHLO bytecode) of the global program ``code``.

    Raises InvalidArgument when XLA's partitioner refuses the program (with XLA's message),
    Internal when the partitioner itself fails in Python; both name the program.
    """
    global _seconds_partitioning
    key = hashlib.sha256(b"%d:%d:" % (num_replicas, num_partitions) + bytes(code)
                         + b"\0" + bytes(compile_options)).digest()
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
    if hit is None:
        started = time.perf_counter()
        if isolated and not calls_python_while_partitioning(code):
            from pjrtkit.stablehlo import isolation

            program, bytecode = isolation.partition_isolated(
                code, compile_options, num_replicas=num_replicas, num_partitions=num_partitions)
        else:
            program, bytecode = partition_and_parse(
                code, compile_options, num_replicas=num_replicas, num_partitions=num_partitions)
        hit = (pickle.dumps(program, protocol=pickle.HIGHEST_PROTOCOL), bytecode)
        with _cache_lock:
            _seconds_partitioning += time.perf_counter() - started
            _cache[key] = hit
            while len(_cache) > CACHE_ENTRIES:
                _cache.popitem(last=False)
    return pickle.loads(hit[0]), hit[1]


# Custom calls whose partitioning XLA hands to a Python function of the process that lowered
# the program: ``jax.debug.inspect_array_sharding`` (and ``visualize_array_sharding`` in a jit)
# and ``custom_partitioning``. Their ``backend_config`` is a key into that process's objects
# (for InspectSharding, the callback's address), meaningless in the parser's child.
PYTHON_PARTITIONED_TARGETS = (b"InspectSharding", b"CustomSPMDPartitioning")


def calls_python_while_partitioning(code: bytes) -> bool:
    """Whether ``code`` holds a custom call XLA's partitioner resolves to a Python function of
    this process; such programs are partitioned here, not in the parser's child. Target names
    are stored verbatim in StableHLO bytecode and text, so a byte search finds them (a constant
    that happens to spell one only moves that program's partitioning into this process)."""
    code = bytes(code)
    return any(target in code for target in PYTHON_PARTITIONED_TARGETS)


def partition_and_parse(code: bytes, compile_options: bytes, *, num_replicas: int,
                        num_partitions: int) -> tuple[Program, bytes]:
    """Partition with XLA and parse the result (what the parser child runs)."""
    from pjrtkit.stablehlo.loader import entry_marks, parse_program

    bytecode = spmd_partition(code, compile_options, num_replicas=num_replicas,
                              num_partitions=num_partitions)
    program = untuple_custom_calls(rename_host_callbacks(parse_program(bytecode)))
    return keep_entry_marks(program, entry_marks(code)), bytecode


def keep_entry_marks(program: Program, marks) -> Program:
    """Put the global program's entry marks (``loader.EntryMarks``) back on the per-device
    program: XLA's partitioner keeps parameters and results in order but drops JAX's donation
    marks (``tf.aliasing_output``, ``jax.buffer_donor``), without which the runtime would keep
    buffers JAX donated, and the results' ``mhlo.memory_kind``, without which an output JAX
    placed in ``pinned_host`` would be reported in ``device`` memory (and JAX refuses the
    executable)."""
    from pjrtkit.stablehlo.entry_layouts import LAYOUT_MODE
    from pjrtkit.stablehlo.loader import MEMORY_KIND_ATTRIBUTE

    main = program.main
    attributes = main.arg_attributes
    for position in marks.donated:
        if position < len(attributes):
            attributes[position]["jax.buffer_donor"] = True
    for position, mode in enumerate(marks.parameter_layout_modes):
        if mode is not None and position < len(attributes):
            attributes[position][LAYOUT_MODE] = mode
    modes = marks.result_layout_modes
    if any(mode is not None for mode in modes) and len(modes) == len(main.result_types):
        main.result_attributes = tuple(
            {**attrs, LAYOUT_MODE: mode} if mode is not None else attrs
            for attrs, mode in zip(main.result_attributes or [{} for _ in modes], modes))
    kinds = marks.result_memory_kinds
    if any(kind is not None for kind in kinds) and len(kinds) == len(main.result_types):
        results = main.result_attributes or [{} for _ in kinds]
        main.result_attributes = tuple(
            {**attrs, MEMORY_KIND_ATTRIBUTE: kind} if kind is not None else attrs
            for attrs, kind in zip(results, kinds))
    return program


def rename_host_callbacks(program: Program) -> Program:
    """Host callbacks get their own target name back (``callbacks.PARTITIONER_CALLBACK_TARGET``
    says why they carried XLA's through the partitioner)."""
    from pjrtkit import callbacks

    for op in walk_ops(program):
        if (op.name == "stablehlo.custom_call" and op.attributes.get("call_target_name")
                in (callbacks.PARTITIONER_CALLBACK_TARGET, callbacks.PARTITIONED_CALLBACK_TARGET)):
            op.attributes["call_target_name"] = callbacks.HOST_CALLBACK_TARGET
    return program


def untuple_custom_calls(program: Program) -> Program:
    """Give custom calls their results back as JAX emits them.

    In XLA's HLO a custom call with several results returns one tuple, and converting the
    partitioned HLO back to StableHLO keeps that: one tuple-typed result read by
    ``stablehlo.get_tuple_element``s. Plugins' custom-call rules expect the results JAX emits,
    one value each; so a custom call whose tuple result is read only by get_tuple_element
    gets one result per element, and those reads become the results themselves.
    """
    ops = list(walk_ops(program))
    readers: dict[int, list[Op]] = {}
    for op in ops:
        for value in op.operands:
            readers.setdefault(value.id, []).append(op)
    renamed: dict[int, Value] = {}
    dropped: set[int] = set()
    for op in ops:
        if (op.name != "stablehlo.custom_call" or len(op.results) != 1
                or not isinstance(op.results[0].type, TupleType)):
            continue
        tuple_value = op.results[0]
        reads = readers.get(tuple_value.id, [])
        if any(r.name != "stablehlo.get_tuple_element" for r in reads):
            continue
        elements = tuple(fresh_value(t) for t in tuple_value.type.elements)
        op.results = elements  # a result nothing reads (a callback's empty tuple) goes too
        for read in reads:
            renamed[read.results[0].id] = elements[int(read.attributes["index"])]
            dropped.add(id(read))
    if not renamed:
        return program  # only unread tuples were replaced: no reads to rename
    for function in program.functions.values():
        _drop_ops(function.body, dropped)
        function.body = rename_reads(function.body, renamed)
    return program


def _drop_ops(region: Region, dropped: set[int]) -> None:
    for block in region.blocks:
        block.ops = [op for op in block.ops if id(op) not in dropped]
        for op in block.ops:
            for inner in op.regions:
                _drop_ops(inner, dropped)


def spmd_partition(code: bytes, compile_options: bytes, *, num_replicas: int,
                   num_partitions: int) -> bytes:
    """The per-device StableHLO bytecode XLA's SPMD partitioner makes of ``code``."""
    from pjrtkit import jax_compat

    dump_dir = tempfile.mkdtemp(prefix="pjrtkit-partition-")
    try:
        try:
            failure = jax_compat.compile_with_hlo_dump(
                bytes(code), bytes(compile_options), num_replicas, num_partitions, dump_dir)
            dumped = _dumped_module(dump_dir, partitioned=num_partitions > 1)
        except PjrtError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug here must not look like a user error
            raise Internal(f"partitioning {_describe(code)} over {num_partitions} partitions "
                           f"failed in pjrtkit's partitioner: {type(exc).__name__}: {exc}"
                           ) from exc
        if dumped is None:
            raise InvalidArgument(
                f"XLA's SPMD partitioner could not partition {_describe(code)} over "
                f"{num_partitions} partitions: {failure or 'it wrote no partitioned program'}")
        try:
            return jax_compat.hlo_module_to_stablehlo(dumped)
        except Exception as exc:  # noqa: BLE001
            raise Internal(f"converting the partitioned {_describe(code)} back to StableHLO "
                           f"failed: {type(exc).__name__}: {exc}") from exc
    finally:
        shutil.rmtree(dump_dir, ignore_errors=True)


def _dumped_module(dump_dir: str, *, partitioned: bool) -> bytes | None:
    """The HloModuleProto after SPMD partitioning, from XLA's dump: field 1 of the dumped
    ``xla.HloProto``. Over one partition no partitioning pass runs and the module before
    optimizations is taken; over several, a missing partitioned module means the pass failed
    (the global program must never pass for the per-device one)."""
    from pjrtkit.runtime.compile_options import wire_fields

    patterns = ["*after_spmd-partitioning*.hlo.pb"]
    if not partitioned:
        patterns.append("*before_optimizations.hlo.pb")
    for pattern in patterns:
        found = sorted(glob.glob(os.path.join(dump_dir, pattern)))
        if found:
            with open(found[0], "rb") as handle:
                proto = handle.read()
            for field, wire, value in wire_fields(proto):
                if field == 1 and wire == 2:
                    return bytes(value)
    return None


def _describe(code: bytes) -> str:
    """How errors name a program that may not even parse: by its digest."""
    digest = hashlib.sha256(bytes(code)).hexdigest()[:12]
    return f"the program (sha256 {digest}...)"
