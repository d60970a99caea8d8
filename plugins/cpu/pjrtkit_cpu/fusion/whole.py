"""Whole-program kernels: a program that is one fused elementwise group, of any size, becomes
one compiled Numba loop with a C entry point that the core's C execute path calls without
entering Python (``pjrtkit.types.NativeKernel``).

Fusion leaves groups under ``groups.MIN_ELEMENTS`` to NumPy's per-op kernels: as separate
steps, a compiled loop would save less than its dispatch costs. A program that is nothing but
such a group is different: compiled, the whole call can be answered in C (jit(x * 2 + 1) on
f32[3]: the framework's own cost is all there is). So ``fuse_whole_program`` fuses the entry
block of such a program into its one fused op, whatever its size, and marks it
``kernel.WHOLE_PROGRAM``; the executable then holds a ``WholeProgram``, which generates the C
entry (``native``, a ``numba.cfunc`` calling the group's kernel on ``carray`` views of the
pointers C passes) and compiles the module in the background with the disk cache like every
fused loop: at once for a group of fusion size, after ``COMPILE_AFTER_CALLS`` executions for a
small one (a program run once or twice, the common case in tests and notebooks, never costs a
compile). Until then, and whenever C declines, the ordinary plan runs.

Before any compile, the core's elementwise VM (``pjrtkit.elementwise_vm``, C loops built at
install time) runs the group when it can read it (every input read whole or as one scalar,
every op in its table): the kernel is handed over at once, through a ``KernelCell``, and the
Numba loop replaces it in that cell when its compile lands. A small group the VM runs is never
compiled: its executions no longer reach Python to count towards ``COMPILE_AFTER_CALLS``, and
it needs no compile to be answered in C (the first executions of an eager loop of jnp ops: no
Numba import, no compile competing for the GIL). The VM computes float32 transcendentals
through libm in float64 (as the NumPy kernels do), slower per element than the Numba loop's
vectorized ones, which is why groups of fusion size still compile.
``PJRTKIT_CPU_ELEMENTWISE_VM=0`` turns the VM off (every whole program waits for its compile).
"""
from __future__ import annotations

import dataclasses
import os
import threading

import numpy as np

from pjrtkit import elementwise_vm
from pjrtkit.stablehlo.ir import TERMINATORS, Block, Program, Region, TensorType
from pjrtkit.types import NativeKernel

from pjrtkit_cpu.contraction import MULTIPLY_ADD, contract_block
from pjrtkit_cpu.fusion import codegen, groups as fusion_groups
from pjrtkit_cpu.fusion.kernel import WHOLE_PROGRAM, FusedKernel
from pjrtkit_cpu.fusion.rewrite import FUSED_OP, fuse_block

# Executions of a small whole program before its kernel is compiled.
COMPILE_AFTER_CALLS = 3
VM_ENABLED = os.environ.get("PJRTKIT_CPU_ELEMENTWISE_VM", "1") not in ("", "0")


def fuse_whole_program(program: Program) -> Program:
    """``program`` (already through ``fuse_program``) with its entry block made one fused op
    marked ``WHOLE_PROGRAM`` when the block is one group and constants, else as it is."""
    function = program.functions[program.entry]
    block = function.body.entry
    if len(function.body.blocks) != 1:
        return program
    fused = [op for op in block.ops if op.name == FUSED_OP]
    if not fused:
        found = fusion_groups.find_groups(block, whole_block=True)
        if len(found) != 1:
            return program
        block = fuse_block(block, found)
        if block is None:
            return program
        fused = [op for op in block.ops if op.name == FUSED_OP]
    if len(fused) != 1 or not _only_op(block, fused[0]):
        return program
    marked = dataclasses.replace(
        fused[0], attributes={**fused[0].attributes, WHOLE_PROGRAM: True})
    ops = [marked if op is fused[0] else op for op in block.ops]
    body = Region([Block(block.arguments, ops)])
    functions = {**program.functions,
                 program.entry: dataclasses.replace(function, body=body)}
    return dataclasses.replace(program, functions=functions)


def _only_op(block: Block, fused) -> bool:
    """Whether ``fused`` is the block's only op besides constants and a terminator returning
    its results, each once."""
    for op in block.ops:
        if op is fused or op.name == "stablehlo.constant":
            continue
        if op.name in TERMINATORS:
            ids = [v.id for v in op.operands]
            results = {r.id for r in fused.results}
            return bool(ids) and len(set(ids)) == len(ids) and set(ids) <= results
        return False
    return False


class WholeProgram:
    """The C entry of a plan that is one ``FusedKernel`` of a whole program: compiles it (now,
    or after ``COMPILE_AFTER_CALLS`` executions) and hands it over as a ``NativeKernel``."""

    __slots__ = ("_kernel", "_source", "_signature", "_context", "_keep", "_calls", "_native",
                 "_lock", "_started", "_cell")

    def __init__(self, kernel: FusedKernel, source: str, signature: list, context: np.ndarray,
                 keep: tuple, compile_now: bool, vm: elementwise_vm.Program | None = None):
        self._kernel = kernel
        self._source = source
        self._signature = signature
        self._context = context
        self._keep = keep
        self._calls = 0
        self._native: NativeKernel | None = None
        self._lock = threading.Lock()
        self._started = False
        self._cell = None
        if vm is not None:  # answered in C from the first execution the core serves
            self._cell = elementwise_vm.KernelCell(elementwise_vm.ADDRESS, vm.context, vm)
            self._native = NativeKernel(address=self._cell.address,
                                        argument_address=dense_address,
                                        context=self._cell.context, keepalive=self._cell)
        if compile_now:
            self._start()

    def called(self) -> None:
        """One more execution (the plan's); starts the compile at the threshold (never for a
        small program the VM runs)."""
        if not self._started and self._cell is None:
            self._calls += 1
            if self._calls >= COMPILE_AFTER_CALLS:
                self._start()

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        self._kernel.compile_with(self._source, self._signature, self._ready)

    def _ready(self, future) -> None:
        if future.exception() is not None:
            # logged by the cache; the plan keeps running (and its kernel asks again when
            # the compile was skipped for a full queue, calling this again)
            return
        native = future.result().py_func.__globals__.get("native")
        if native is None:
            return
        if self._cell is not None:  # the compiled loop replaces the VM's program
            self._cell.publish(int(native.address), int(self._context.ctypes.data),
                               (native, self._context, self._keep))
            return
        self._native = NativeKernel(address=int(native.address),
                                    argument_address=dense_address,
                                    context=int(self._context.ctypes.data),
                                    keepalive=(native, self._context, self._keep))

    def native_kernel(self, device) -> NativeKernel | None:
        return self._native


def dense_address(payload) -> int | None:
    """A payload's address when it is a C-contiguous NumPy array (what the C entry reads)."""
    if type(payload) is not np.ndarray or not payload.flags.c_contiguous:
        return None
    return payload.__array_interface__["data"][0]


def whole_program_of(plan) -> WholeProgram | None:
    """A ``WholeProgram`` for ``plan`` when it is one whole-program ``FusedKernel`` whose
    inputs are the program's arguments and constants and whose outputs are the program's
    results, each once; else None."""
    if len(plan.steps) != 1:
        return None
    kernel, ins, outs, op = plan.steps[0]
    if not isinstance(kernel, FusedKernel) or not op.attributes.get(WHOLE_PROGRAM):
        return None
    arg_index = {slot: i for i, slot in enumerate(plan.arg_slots)}
    out_index = {slot: j for j, slot in enumerate(outs)}
    if (len(set(plan.result_slots)) != len(plan.result_slots)
            or any(slot not in out_index for slot in plan.result_slots)
            or len(plan.result_slots) != len(outs)):
        return None
    constants = []
    reads = []
    for slot, value in zip(ins, op.operands):
        if not isinstance(value.type, TensorType):
            return None
        size, dtype = int(np.prod(value.type.shape, dtype=np.int64)), value.type.dtype
        if slot in arg_index:
            reads.append(("args", arg_index[slot], size, dtype))
        elif slot in plan.constants:
            array = np.ascontiguousarray(plan.constants[slot], dtype=dtype).reshape(-1)
            reads.append(("ctx", len(constants), size, dtype))
            constants.append(array)
        else:
            return None
    writes = {}
    for program_output, slot in enumerate(plan.result_slots):
        value = op.results[out_index[slot]]
        writes[out_index[slot]] = (program_output, int(np.prod(value.type.shape, dtype=np.int64)),
                                   value.type.dtype)
    views = [f"carray({where}[{i}], ({size},), np.{np.dtype(dtype).name})"
             for where, i, size, dtype in reads]
    views += [f"carray(outs[{writes[j][0]}], ({writes[j][1]},), np.{np.dtype(writes[j][2]).name})"
              for j in range(len(outs))]
    extra = "\n".join([
        "",
        "from numba import carray, cfunc, types as nbtypes",
        "",
        "",
        "@cfunc(nbtypes.int32(nbtypes.CPointer(nbtypes.voidptr), "
        "nbtypes.CPointer(nbtypes.voidptr), nbtypes.CPointer(nbtypes.voidptr)), cache=True, "
        'error_model="numpy", fastmath={"contract"})',
        "def native(args, outs, ctx):",
        f"    kernel({', '.join(views)})",
        "    return 0",
        ""])
    context = np.array([a.__array_interface__["data"][0] for a in constants] or [0],
                       dtype=np.uintp)
    claimed = kernel.claim()
    if claimed is None:
        return None
    source, signature = claimed
    size = int(np.prod(op.attributes["shape"], dtype=np.int64))
    return WholeProgram(kernel, source + extra, signature, context, tuple(constants),
                        compile_now=size >= fusion_groups.MIN_ELEMENTS,
                        vm=vm_program(plan, op, ins, outs, size))


def vm_program(plan, op, ins, outs, size: int) -> elementwise_vm.Program | None:
    """The whole program's fused op as a program of the core's elementwise VM, or None when
    the VM cannot run it (an input read with strides, an op or dtype outside its table) or is
    not built. Multiply-adds are contracted first, as the Numba loop's LLVM contracts them."""
    if elementwise_vm.ADDRESS is None or not VM_ENABLED:
        return None
    arg_index = {slot: i for i, slot in enumerate(plan.arg_slots)}
    inputs = []
    for slot, value, (kind, _aligned) in zip(ins, op.operands, op.attributes["input_kinds"]):
        if kind not in ("full", "scalar"):
            return None
        scalar = kind == "scalar"
        if slot in arg_index:
            inputs.append(elementwise_vm.Input(value.type.dtype, scalar, argument=arg_index[slot]))
        else:
            inputs.append(elementwise_vm.Input(value.type.dtype, scalar,
                                               constant=plan.constants[slot]))
    block = op.regions[0].entry
    returned = next(inner for inner in block.ops if inner.name in TERMINATORS).operands
    out_index = {slot: j for j, slot in enumerate(outs)}
    outputs = [returned[out_index[slot]].id for slot in plan.result_slots]
    try:
        return elementwise_vm.render(contract_block(block), inputs, outputs, size,
                                     absorbed=codegen.ABSORBED, multiply_add=MULTIPLY_ADD)
    except elementwise_vm.Declined:
        return None
