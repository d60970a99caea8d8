"""A program's HBM per device, as a TPU compiler counts it, and the verdict "does it fit".

Sizes are TPU-padded (checked against libtpu 0.0.42.1's ``memory_analysis()``,
``tests/test_tpu_hbm.py``): every array takes at least 512 bytes; a rank-1 array is padded to a
multiple of 128 elements; an array of rank 2 or more is tiled on two of its dimensions, the
minor one to a multiple of 128 and the second-minor one to a multiple of
``min(next power of two, 8)`` whatever the element type, and XLA picks the two dimensions that
waste least (so a ``(17, 3)`` array is laid out with 17 as its minor dimension, and a
``(N, 100)`` bfloat16 array with N minor and 100 padded to 104).

Temporaries are estimated, not XLA's: the peak of the arrays alive between the top-level ops
of the per-device program, where results of elementwise-like ops that only feed other such ops
count as fused (not materialized), as XLA's TPU fusion would make them. Loops, calls and
fusions the TPU compiler does otherwise make it differ; tests report both side by side.
"""
from __future__ import annotations

import dataclasses
import itertools
import math

from pjrtkit.errors import ResourceExhausted
from pjrtkit.runtime.memory_limits import format_bytes, per_device_limit
from pjrtkit.stablehlo.ir import TERMINATORS, Program, TensorType

MIN_ALLOCATION = 512
LANES = 128
SUBLANES = 8

# Ops XLA's TPU compiler fuses into their consumers when every operand has the result's shape.
_NEVER_FUSED = frozenset({"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution",
                          "stablehlo.sort", "stablehlo.gather", "stablehlo.scatter",
                          "stablehlo.custom_call", "stablehlo.while", "stablehlo.case",
                          "stablehlo.if", "stablehlo.reduce", "stablehlo.reduce_window",
                          "stablehlo.all_reduce", "stablehlo.all_gather",
                          "stablehlo.reduce_scatter", "stablehlo.all_to_all",
                          "stablehlo.collective_permute", "func.call", "stablehlo.rng",
                          "stablehlo.rng_bit_generator", "stablehlo.fft"})
_OUTPUT_FUSIBLE = frozenset({"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"})
_RESHAPING = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.convert",
                        "stablehlo.iota", "stablehlo.constant", "stablehlo.transpose"})


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def padded_bytes(dtype, shape: tuple[int, ...]) -> int:
    """Bytes a TPU allocates for an array of ``dtype`` and ``shape`` (tile padding included)."""
    itemsize = dtype.itemsize
    shape = tuple(int(d) for d in shape)
    if len(shape) == 0:
        elements = 1
    elif len(shape) == 1:
        elements = _round_up(max(shape[0], 1), LANES)
    else:
        best = None
        for minor, second in itertools.permutations(range(len(shape)), 2):
            rows = shape[second]
            row_tile = min(1 << max(rows - 1, 0).bit_length(), SUBLANES)
            rest = math.prod(d for i, d in enumerate(shape) if i not in (minor, second))
            size = rest * _round_up(rows, row_tile) * _round_up(shape[minor], LANES)
            best = size if best is None else min(best, size)
        elements = best
    return _round_up(max(elements * itemsize, 1), MIN_ALLOCATION)


def _value_bytes(value) -> int:
    t = value.type
    return padded_bytes(t.dtype, t.shape) if isinstance(t, TensorType) else 0


@dataclasses.dataclass(frozen=True)
class ProgramMemory:
    """Per-device HBM of one program, as ``compiled.memory_analysis()`` reports it."""

    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes

    def describe(self) -> str:
        return (f"{format_bytes(self.total_bytes)} per device: arguments "
                f"{format_bytes(self.argument_bytes)}, outputs {format_bytes(self.output_bytes)}"
                f", aliased {format_bytes(self.alias_bytes)}, temporaries (estimated) "
                f"{format_bytes(self.temp_bytes)}; TPU tile padding included")


def _fusible(op) -> bool:
    if op.regions or op.name in _NEVER_FUSED:
        return False
    if op.name in _RESHAPING:
        return True
    shapes = {v.type.shape for v in (*op.operands, *op.results) if isinstance(v.type, TensorType)}
    return len(shapes) <= 1


def _fused_values(ops) -> set[int]:
    """Ids of the values of a block that XLA's TPU fusion never materializes: results of
    elementwise-like ops (and of contractions: output fusion) whose every user is
    elementwise-like, so they live only inside their consumers' fused loops."""
    consumers: dict[int, list] = {}
    for op in ops:
        for v in op.operands:
            consumers.setdefault(v.id, []).append(op)
    fused = set()
    for op in ops:
        if op.name in TERMINATORS or not (_fusible(op) or op.name in _OUTPUT_FUSIBLE):
            continue
        for v in op.results:
            users = consumers.get(v.id, [])
            if users and all(_fusible(user) and user.name not in TERMINATORS for user in users):
                fused.add(v.id)
    return fused


def _peak_temporaries(program: Program) -> int:
    main = program.main
    ops = main.body.entry.ops
    outputs = {v.id for op in ops if op.name in TERMINATORS for v in op.operands}
    arguments = {v.id for v in main.arguments}
    fused = _fused_values(ops)
    last_use: dict[int, int] = {}
    for index, op in enumerate(ops):
        for v in op.operands:
            last_use[v.id] = index
    live: dict[int, int] = {}
    peak = 0
    for index, op in enumerate(ops):
        if op.name in TERMINATORS:
            break
        for v in op.results:
            if v.id not in outputs and v.id not in arguments and v.id not in fused:
                live[v.id] = _value_bytes(v)
        peak = max(peak, sum(live.values()))
        for v in op.operands:
            if last_use.get(v.id) == index:
                live.pop(v.id, None)
    return peak


def fused_bytes_accessed(program: Program) -> int:
    """Bytes one execution reads and writes in HBM when elementwise chains are fused, as XLA's
    TPU cost analysis counts them after fusion: each materialized value is written once and
    read once by every fused computation that uses it, at its padded size."""
    ops = program.main.body.entry.ops
    fused = _fused_values(ops)
    producer = {v.id: op for op in ops for v in op.results}
    total = 0
    for op in ops:
        if op.name in TERMINATORS or all(v.id in fused for v in op.results):
            continue
        total += sum(_value_bytes(v) for v in op.results)
        seen: set[int] = set()
        stack = list(op.operands)
        while stack:
            v = stack.pop()
            if v.id in seen:
                continue
            seen.add(v.id)
            if v.id in fused:  # computed inside this fusion from its own inputs
                stack.extend(producer[v.id].operands)
            else:
                total += _value_bytes(v)
    return total


def program_memory(program: Program) -> ProgramMemory:
    main = program.main
    arguments = sum(_value_bytes(v) for v in main.arguments)
    terminator = main.body.entry.ops[-1]
    outputs = sum(_value_bytes(v) for v in terminator.operands)
    alias = sum(_value_bytes(v) for v, attrs in zip(main.arguments, main.arg_attributes or ())
                if "tf.aliasing_output" in attrs)
    return ProgramMemory(arguments, outputs, alias, _peak_temporaries(program))


def hbm_limit(devices) -> int | None:
    """The HBM a program may use per device: the devices' declared HBM, lowered by
    ``PJRTKIT_TPU_MEMORY_LIMIT``."""
    capacities = [d.memory_space("device").capacity_bytes for d in devices]
    limits = [c for c in capacities if c is not None]
    user = per_device_limit("tpu")
    if user is not None:
        limits.append(user)
    return min(limits) if limits else None


def check_fits(memory: ProgramMemory, devices, describe_program: str) -> None:
    """RESOURCE_EXHAUSTED naming the sizes when ``memory`` exceeds the devices' HBM, as
    libtpu's compiler refuses such a program ("... exceeds available HBM")."""
    limit = hbm_limit(devices)
    if limit is not None and memory.total_bytes > limit:
        raise ResourceExhausted(
            f"pjrtkit_tpu: {describe_program} needs {memory.describe()}; that exceeds available "
            f"HBM ({format_bytes(limit)} per device on {devices[0].kind}). Shard it over more "
            f"devices, use smaller or bfloat16 arrays, or donate arguments")
