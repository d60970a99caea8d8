"""Multiply-adds rounded once, as XLA's CPU backend rounds them.

XLA compiles elementwise code with LLVM, which may contract a multiply feeding an add or a
subtract into one fused multiply-add (its target options allow FP-op fusion), so
``a * b + c`` in float32 is rounded once. NumPy's per-op kernels round twice: before this
pass, float32 ``a * b + c`` differed from XLA in about a quarter of all elements, and so did
``jnp.linspace`` and the bins of ``jnp.histogram``. Fused loops contract already (Numba
with fastmath "contract", ``loopnest.module``); this pass gives the per-op path the same
rounding: a ``stablehlo.add``/``subtract`` of a ``stablehlo.multiply`` becomes one
``pjrtkit_cpu.multiply_add`` op, computed by ``lowering/multiply_add.py``.

What LLVM contracts there, measured against XLA (jax 0.10.2, random elements, bit for
bit): a multiply feeding the add or subtract, on either side (``c - a * b`` is
``fma(-a, b, c)``, and a negated product too: ``a - (-(b * c))`` is ``fma(b, c, a)``; when
both operands are multiplies, see below); never a product with other uses
(``(a * b + c) * (a * b)`` rounds ``a * b``); never where every input is known at compile
time (constants, iotas: LLVM folds those one op at a time, e.g. jnp.linspace's
``1 - iota / 49``). XLA's
simplifier also changes what is multiplied: a division by a constant is a multiplication by
its reciprocal (``reciprocal_divisions``) and scalar factors are gathered
(``gather_scalar_factors``); both run before fusion, on every block. float32 and float64 are
contracted; bfloat16 is rounded after each op (its product is rounded to bfloat16 before the
add). float16 depends on the host, as XLA's LLVM code does: on a CPU with float16 arithmetic
(AVX512-FP16) the multiply-add is contracted and the float32 product kept (exact: the product of
two float16 values is exact in float32), which ``multiply_add`` does too; on any other x86 CPU
LLVM promotes each float16 op to float32 and rounds its result back, so the product is rounded
to float16 before the add (measured on an AMD EPYC, znver4, 2026-11-27: every one of 100000
``a * b + c``, ``a + b + c`` and ``a * b * c`` rounded per op, none kept in float32), and
nothing is contracted (``float16_contracted``).

Which of two multiplies feeding one add is contracted: LLVM's choice, modelled (``_ranks``,
``_right_first``: the product XLA's simplifier rewrote, ``REASSOCIATED``, else the one of
lower rank, else the left; a subtract's left) and measured on random expressions (most agree
with XLA; those that do not now give one result at every call). Not matched: a
product of loop invariants in a loop body, which XLA hoists out of the loop before LLVM sees it
(so rounds it) while our loops contract it; multiplies of negated operands, which LLVM's
instruction combiner rewrites before choosing. Nor where LLVM unrolls a
short loop and folds a multiply by a constant away: ``jnp.histogram(x, 3)``'s edges (a
3-element linspace) differ by one ulp for about half of all inputs, as before this pass.

Applied to the top-level blocks of the entry function and of the functions only they call,
to the unfused fallback of fused loops (``lowering/fused.py``) and to the interpreted bodies of
while loops and branches of if and case (``lowering/control_flow.py``, after inlining their
calls), so that a program gives the same bits before and after its loop is compiled. Native
loops get their blocks uncontracted: their LLVM contracts them.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from pjrtkit.semantics import dtypes as D
from pjrtkit.stablehlo.ir import (Block, Op, Program, Region, TensorType, Value, fresh_value,
                                  walk_region, with_function_bodies)

MULTIPLY_ADD = "pjrtkit_cpu.multiply_add"


@functools.lru_cache(maxsize=None)
def float16_contracted() -> bool:
    """Whether XLA's CPU code contracts float16 multiply-adds on this host: where LLVM finds
    float16 arithmetic in the CPU (AVX512-FP16), as llvmlite (Numba's LLVM) reads the host's
    features the way XLA's LLVM does."""
    try:
        from llvmlite import binding
        return bool(binding.get_host_cpu_features().get("avx512fp16", False))
    except Exception:  # noqa: BLE001 - no llvmlite or an unknown host: round per op
        return False


@functools.lru_cache(maxsize=None)
def contracted_dtypes() -> frozenset:
    """The dtypes whose multiply-adds are contracted on this host."""
    return frozenset({D.FLOAT32, D.FLOAT64, *((D.FLOAT16,) if float16_contracted() else ())})

_MULTIPLY = "stablehlo.multiply"
# Marks a multiply ``gather_scalar_factors`` made: XLA emits such a replacement after the
# instructions it keeps, and it is the one contracted when both operands of an add are
# multiplies (jnp.linspace: ``start * (1 - t) + iota * (stop * c)`` rounds the first product).
REASSOCIATED = "pjrtkit_cpu.reassociated"
_ADDS = ("stablehlo.add", "stablehlo.subtract")


def contract_program(program: Program) -> Program:
    """``program`` with the multiply-adds of the top-level blocks of its entry function and of
    the functions only those blocks call contracted (the input is not modified; returned as is
    when nothing changes). A function a loop body or branch calls is left as it is: native
    loops inline it and contract on their own (they have no multiply_add op)."""
    eligible = _called_from_top(program) - _called_inside_regions(program)
    functions = {}
    changed = False
    for name, function in program.functions.items():
        if name not in eligible or len(function.body.blocks) != 1:
            functions[name] = function
            continue
        block = contract_block(function.body.entry)
        if block is not function.body.entry:
            changed = True
            function = dataclasses.replace(function, body=Region([block]))
        functions[name] = function
    return dataclasses.replace(program, functions=functions) if changed else program


def _calls(ops) -> set[str]:
    return {str(op.attributes.get("callee", "")) for op in ops if op.name == "func.call"}


def _called_from_top(program: Program) -> set[str]:
    """The entry function and the functions called from top-level blocks, transitively."""
    found, pending = set(), [program.entry]
    while pending:
        name = pending.pop()
        function = program.functions.get(name)
        if name in found or function is None:
            continue
        found.add(name)
        for block in function.body.blocks:
            pending.extend(_calls(block.ops))
    return found


def _called_inside_regions(program: Program) -> set[str]:
    """Functions some op's region (a loop body, a branch) calls, transitively."""
    found: set[str] = set()
    for function in program.functions.values():
        for block in function.body.blocks:
            for op in block.ops:
                for region in op.regions:
                    found |= _calls(walk_region(region))
    pending = list(found)
    while pending:
        function = program.functions.get(pending.pop())
        if function is None:
            continue
        for block in function.body.blocks:
            for callee in _calls(block.ops) - found:
                found.add(callee)
                pending.append(callee)
    return found


def contract_region(region: Region) -> Region:
    """``region`` (one block) contracted; itself when nothing changes."""
    if len(region.blocks) != 1:
        return region
    block = contract_block(region.entry)
    return region if block is region.entry else Region([block])


def contract_block(block: Block) -> Block:
    """``block`` with each add/subtract of a single-use multiply (float32, float16) one
    ``MULTIPLY_ADD`` op; ``block`` itself when there is none."""
    uses: dict[int, int] = {}
    for op in block.ops:
        for value in op.operands:
            uses[value.id] = uses.get(value.id, 0) + 1
        for region in op.regions:  # reads inside regions count too
            for inner in walk_region(region):
                for value in inner.operands:
                    uses[value.id] = uses.get(value.id, 0) + 1
    constant = _constant_values(block)
    rank = _ranks(block, constant)
    multiplies = {op.results[0].id: op for op in block.ops
                  if op.name == _MULTIPLY and _contractible(op.results[0])}
    # XLA merges identical multiplies first (CSE): JAX traces ``(a * b + c) * (a * b)`` as two
    # multiplies of one use each, XLA computes one with two uses, and does not contract it.
    # A broadcast is no instruction in a loop: two broadcasts of one value are one value there.
    broadcast_of = {op.results[0].id: op.operands[0].id for op in block.ops
                    if op.name == "stablehlo.broadcast_in_dim"
                    and not op.attributes.get("broadcast_dimensions")}

    def key_of(op):
        return tuple(sorted(broadcast_of.get(v.id, v.id) for v in op.operands))

    same: dict[tuple[int, ...], int] = {}
    for op in multiplies.values():
        same[key_of(op)] = same.get(key_of(op), 0) + uses.get(op.results[0].id, 0)
    for op in multiplies.values():
        uses[op.results[0].id] = same[key_of(op)]
    # A negated product contracts too (LLVM folds the negation into the add first:
    # ``a - (-(b * c))`` is ``fma(b, c, a)``, ``(-(b * c)) + a`` is ``fma(-b, c, a)``; measured).
    negated = {op.results[0].id: op for op in block.ops
               if op.name == "stablehlo.negate" and op.operands[0].id in multiplies
               and uses.get(op.operands[0].id) == 1}
    replaced: dict[int, Op | None] = {}

    def product_of(value):
        """(multiply, negate or None) computing ``value``, if it is a product of one use."""
        if uses.get(value.id) != 1:
            return None  # a product with other uses is rounded (measured)
        if value.id in multiplies:
            found = (multiplies[value.id], None)
        elif value.id in negated:
            negation = negated[value.id]
            found = (multiplies[negation.operands[0].id], negation)
        else:
            return None
        return None if any(replaced.get(id(o), o) is None for o in found if o) else found

    producer = {result.id: op for op in block.ops for result in op.results}

    for op in block.ops:
        if op.name not in _ADDS or not _contractible(op.results[0]):
            continue
        if all(v.id in constant for v in op.operands):
            continue  # folded at compile time, one op at a time, as LLVM folds it
        left, right = op.operands
        products = {"left": product_of(left), "right": product_of(right)}
        order = ("right", "left") if _right_first(
            op, products["left"], products["right"], rank,
            (_negated_after_sinking(left, producer, uses),
             _negated_after_sinking(right, producer, uses))) else ("left", "right")
        for side in order:
            if products[side] is None:
                continue
            product, negation = products[side]
            a, b = product.operands
            addend = right if side == "left" else left
            subtract = op.name == "stablehlo.subtract"
            attributes = {"negate_product": (subtract and side == "right") != (negation is not None),
                          "negate_addend": subtract and side == "left"}
            replaced[id(product)] = None
            if negation is not None:
                replaced[id(negation)] = None
            replaced[id(op)] = Op(MULTIPLY_ADD, (a, b, addend), op.results, attributes, (),
                                  location=op.location)
            break
    if not replaced:
        return block
    ops = []
    for op in block.ops:
        new = replaced.get(id(op), op)
        if new is not None:
            ops.append(new)
    return Block(block.arguments, ops)


def _negated_after_sinking(value: Value, producer: dict[int, Op], uses: dict[int, int]) -> bool:
    """Whether LLVM's instruction combiner makes ``value`` a negation: it sinks the negation of
    a one-use operand out of a multiply (``-x * y`` is ``-(x * y)``) and cancels two
    (``-(-x)`` is ``x``). (A module function: a closure calling itself is a reference cycle.)"""
    op = producer.get(value.id)
    if op is None or uses.get(value.id) != 1:
        return False
    if op.name == "stablehlo.negate":
        return not _negated_after_sinking(op.operands[0], producer, uses)
    if op.name == _MULTIPLY:
        a, b = op.operands
        return (_negated_after_sinking(a, producer, uses)
                != _negated_after_sinking(b, producer, uses))
    return False


# Ops whose value is known at compile time when their operands are (LLVM folds them one op
# at a time, never into an FMA).
_FOLDABLE_SOURCES = frozenset({"stablehlo.constant", "stablehlo.iota"})
_EFFECTS = frozenset({"stablehlo.rng", "stablehlo.rng_bit_generator", "stablehlo.custom_call",
                      "stablehlo.partition_id", "stablehlo.replica_id", "func.call"})


def _constant_values(block: Block) -> set[int]:
    """Ids of the block's values computed from constants and iotas alone."""
    constant: set[int] = set()
    for op in block.ops:
        if op.regions or op.name in _EFFECTS:
            continue
        if op.name in _FOLDABLE_SOURCES or (op.operands
                                            and all(v.id in constant for v in op.operands)):
            constant.update(r.id for r in op.results)
    return constant


# Which of two multiplies feeding one add LLVM contracts: its Reassociate pass reorders the
# operands of every commutative instruction (fast-math flags or not), the one of lower rank
# first, and instruction selection then contracts the first operand that is a multiply of one
# use. A value's rank: 0 for a constant, by position for a value loaded (a loop's inputs are
# loaded in the order of their first use; rank-0 inputs before the loop, so below them), and
# one more than its operands' highest for an arithmetic instruction (a negation adds none).
# Measured with Numba's loops and XLA's (10**5 float32 elements, bit for bit):
# ``(x*1.5)*x + x*x`` and ``x*y + x*x`` contract ``x*x``, ``(x+y)*x + (x-y)*y`` the left.
_ONE_INSTRUCTION = frozenset({"stablehlo.multiply", "stablehlo.add", "stablehlo.subtract",
                              "stablehlo.divide"})
_NO_INSTRUCTION = frozenset({"stablehlo.negate", "stablehlo.broadcast_in_dim",
                             "stablehlo.reshape"})
_LOADED_IN_LOOP = 1 << 16


def _ranks(block: Block, constant: set[int]) -> dict[int, int]:
    """Reassociate's rank of the block's values where it is known (the block's arguments are
    the loop's inputs, loaded in the order of their first use: a fused group's inputs are in
    that order, a native loop body reads its values where it uses them); ops whose instructions are not one
    arithmetic instruction, and what they feed, have none. So has an iota: the loop computes it
    from its index (it is folded only once the loop is unrolled, after Reassociate)."""
    rank: dict[int, int] = {}
    arguments = {value.id: value for value in block.arguments
                 if isinstance(value.type, TensorType)}
    loaded = 0
    for op in block.ops:
        for value in op.operands:
            if value.id in arguments and value.id not in rank:
                loaded += 1
                rank[value.id] = loaded + (0 if value.type.shape == () else _LOADED_IN_LOOP)
    for op in block.ops:
        if op.name == "stablehlo.constant" or (
                op.results and all(r.id in constant for r in op.results)
                and all(rank.get(v.id) == 0 for v in op.operands)):
            rank.update((r.id, 0) for r in op.results)
            continue
        if op.name not in _ONE_INSTRUCTION and op.name not in _NO_INSTRUCTION:
            continue
        ranks = [rank.get(v.id) for v in op.operands]
        if None in ranks:
            continue
        rank[op.results[0].id] = max(ranks) + (op.name in _ONE_INSTRUCTION)
    return rank


def _right_first(op: Op, left, right, rank: dict[int, int], negated: tuple[bool, bool]) -> bool:
    """Whether LLVM contracts the ``right`` product rather than the ``left`` one (each a
    ``(multiply, negate or None)`` feeding ``op``, or None). LLVM first folds a negated operand
    into the op (``a + (-b)`` is ``a - b``, ``(-a) + b`` is ``b - a``, ``a - (-b)`` is
    ``a + b``, ``(-a) - b`` is ``-(a + b)``; ``negated`` says which operands are negations
    once LLVM has sunk them out of multiplies); a subtract then contracts its left operand first,
    an add the product XLA's simplifier rewrote (``REASSOCIATED``, measured on jnp.linspace),
    else the one of lower rank where both ranks are known, else the left."""
    if left is None or right is None:
        return False
    left_negated, right_negated = negated
    add = op.name == "stablehlo.add"
    if add and left_negated != right_negated:
        return left_negated  # a subtract whose left operand is the product not negated
    if add and left_negated:
        return True  # ``(-a) + (-b)`` is ``(-b) - a``: the negated product on the left
    if not add and left_negated == right_negated:
        # a subtract: its left operand first; ``(-a) - (-b)`` is ``b - a``
        return left_negated
    # An add (or a subtract that folded into one)
    if _reassociated(right[0]) or _reassociated(left[0]):
        return _reassociated(right[0]) and not _reassociated(left[0])
    left_rank, right_rank = rank.get(left[0].results[0].id), rank.get(right[0].results[0].id)
    return left_rank is not None and right_rank is not None and right_rank < left_rank


def _reassociated(op: Op | None) -> bool:
    return op is not None and bool(op.attributes.get(REASSOCIATED))


def _contractible(value) -> bool:
    return isinstance(value.type, TensorType) and value.type.dtype in contracted_dtypes()


def reciprocal_program(program: Program) -> Program:
    """``program`` with ``reciprocal_divisions`` applied to every block (loop bodies and
    branches included: XLA simplifies every computation); run before fusion, so that fused
    and native loops multiply too."""
    return with_function_bodies(program, _reciprocal_region)


def _reciprocal_region(region: Region) -> Region:
    blocks = []
    for block in region.blocks:
        ops = []
        for op in block.ops:
            if op.regions:
                regions = tuple(_reciprocal_region(r) for r in op.regions)
                if any(new is not old for new, old in zip(regions, op.regions)):
                    op = dataclasses.replace(op, regions=regions)
            ops.append(op)
        changed = any(new is not old for new, old in zip(ops, block.ops))
        block = reciprocal_divisions(Block(block.arguments, ops) if changed else block)
        blocks.append(gather_scalar_factors(block))
    if all(new is old for new, old in zip(blocks, region.blocks)):
        return region
    return Region(blocks)


def reciprocal_divisions(block: Block) -> Block:
    """``block`` with each float32/float64 ``x / c`` (``c`` a constant, maybe broadcast)
    computed as ``x * (1 / c)``, the reciprocal rounded once, as XLA's algebraic simplifier
    rewrites it (measured: ``x / 3.0`` on 100k float32 elements differs from XLA's result in a
    third of them when divided, in none this way); ``block`` itself when there is none. A
    constant divisor the fused loops read is then a multiplier too."""
    constants: dict[int, np.ndarray] = {}
    for op in block.ops:
        if op.name == "stablehlo.constant" and isinstance(op.attributes.get("value"), np.ndarray):
            constants[op.results[0].id] = op.attributes["value"]
        elif (op.name == "stablehlo.broadcast_in_dim" and op.operands[0].id in constants
              and constants[op.operands[0].id].size == 1):
            constants[op.results[0].id] = constants[op.operands[0].id]
    ops = []
    changed = False
    for op in block.ops:
        if (op.name == "stablehlo.divide" and _reciprocal_type(op.results[0])
                and op.operands[1].id in constants):
            divisor = constants[op.operands[1].id]
            dtype = np.dtype(op.results[0].type.dtype)
            with np.errstate(all="ignore"):
                inverse = (dtype.type(1) / np.asarray(divisor, dtype=dtype)).astype(dtype)
            target = op.operands[1].type
            value = fresh_value(target if inverse.size != 1 else TensorType((), dtype))
            ops.append(Op("stablehlo.constant", (), (value,),
                          {"value": inverse.reshape(value.type.shape)}, (),
                          location=op.location))
            if value.type.shape != target.shape:
                broadcast = fresh_value(target)
                ops.append(Op("stablehlo.broadcast_in_dim", (value,), (broadcast,),
                              {"broadcast_dimensions": ()}, (), location=op.location))
                value = broadcast
            ops.append(Op(_MULTIPLY, (op.operands[0], value), op.results, {}, (),
                          location=op.location))
            changed = True
            continue
        ops.append(op)
    return Block(block.arguments, ops) if changed else block


def _reciprocal_type(value) -> bool:
    return isinstance(value.type, TensorType) and value.type.dtype in _RECIPROCAL_DTYPES


_RECIPROCAL_DTYPES = frozenset({D.FLOAT32, D.FLOAT64})


def gather_scalar_factors(block: Block) -> Block:
    """``block`` with each float32/float64 ``broadcast(s) * (x * broadcast(t))`` (``s``, ``t`` one
    element each, either operand order) computed as ``x * broadcast(s * t)``, as XLA's
    algebraic simplifier reassociates it (the scalar product first: ``jnp.linspace``'s
    ``stop * (iota / (num - 1))`` becomes ``iota * (stop / (num - 1))``); ``block`` itself
    when there is none."""
    scalar_of: dict[int, Value] = {}  # broadcast result id -> its one-element source
    products: dict[int, Op] = {}
    for op in block.ops:
        if (op.name == "stablehlo.broadcast_in_dim" and isinstance(op.operands[0].type, TensorType)
                and int(np.prod(op.operands[0].type.shape, dtype=np.int64)) == 1):
            scalar_of[op.results[0].id] = op.operands[0]
        elif op.name == _MULTIPLY and _reciprocal_type(op.results[0]):
            products[op.results[0].id] = op
    ops: list[Op] = []
    changed = False
    for op in block.ops:
        replacement = None
        if op.name == _MULTIPLY and _reciprocal_type(op.results[0]):
            for outer, inner in ((0, 1), (1, 0)):
                s_value = scalar_of.get(op.operands[outer].id)
                product = products.get(op.operands[inner].id)
                if s_value is None or product is None or product is op:
                    continue
                for factor, other in ((1, 0), (0, 1)):
                    t_value = scalar_of.get(product.operands[factor].id)
                    if t_value is not None and product.operands[other].id not in scalar_of:
                        replacement = _scaled(op, product.operands[other], s_value, t_value)
                        break
                if replacement is not None:
                    break
        if replacement is None:
            ops.append(op)
        else:
            ops.extend(replacement)
            changed = True
    return Block(block.arguments, ops) if changed else block


def _scaled(op: Op, x: Value, s: Value, t: Value) -> list[Op]:
    """``x * broadcast(s * t)`` replacing ``op`` (``s`` and ``t`` one element each)."""
    scalar = TensorType((), op.results[0].type.dtype)
    made: list[Op] = []
    factors = []
    for value in (s, t):
        if value.type.shape != ():
            reshaped = fresh_value(scalar)
            made.append(Op("stablehlo.reshape", (value,), (reshaped,), {}, (),
                           location=op.location))
            value = reshaped
        factors.append(value)
    product = fresh_value(scalar)
    made.append(Op(_MULTIPLY, tuple(factors), (product,), {}, (), location=op.location))
    broadcast = fresh_value(op.results[0].type)
    made.append(Op("stablehlo.broadcast_in_dim", (product,), (broadcast,),
                   {"broadcast_dimensions": ()}, (), location=op.location))
    made.append(Op(_MULTIPLY, (x, broadcast), op.results, {REASSOCIATED: True}, (),
                   location=op.location))
    return made
