"""Which ``dynamic_update_slice`` ops of a while body may write into their operand in place.

A scan stacks its outputs with ``dynamic_update_slice(ys, y, i, 0, ...)`` on a carried array
``ys``. Read literally, every step copies all of ``ys`` to change one row: a 1000-step scan
copies its whole output 1000 times. The copy is only needed when someone could still see the
old array. The while kernel owns its carried arrays (it copies the initial value of such a
carry once, on entry, so a caller's buffer or a folded constant is never written), so the body
may update carry ``p`` in place when:

- the update's operand is the body's block argument ``p`` itself;
- its result goes to the terminator at position ``p`` and nowhere else (so the next iteration
  receives the same, still exclusively owned array);
- no op after the update reads argument ``p`` or anything computed from it (kernels may return
  views of their inputs, so every value computed from ``p`` counts as possibly sharing its
  memory). Reads before the update, and the update reading a part of ``p`` as its ``update``
  operand, are fine: NumPy's assignment copies overlapping sources first.

Such ops are renamed to ``IN_PLACE_UPDATE`` (rule in ``lowering.control_flow``).
"""
from __future__ import annotations

import dataclasses

from pjrtkit.stablehlo.ir import TERMINATORS, Block, free_uses

DYNAMIC_UPDATE_SLICE = "stablehlo.dynamic_update_slice"
IN_PLACE_UPDATE = "pjrtkit_cpu.dynamic_update_slice_in_place"


def in_place_positions(body: Block) -> dict[int, int]:
    """{index of an update op in ``body.ops``: the carried position it may write in place}.

    Updates may chain (an unrolled scan updates its output once per unrolled step): each
    link's operand is the previous link's result, owned just as the carry was."""
    terminator = body.ops[-1]
    if terminator.name not in TERMINATORS:
        return {}
    op_uses = [free_uses(op) for op in body.ops]
    last = len(body.ops) - 1
    found: dict[int, int] = {}
    for p, arg in enumerate(body.arguments):
        chain = _update_chain(body, op_uses, arg)
        if not chain:
            continue
        result = body.ops[chain[-1]].results[0].id
        readers = [i for i, u in enumerate(op_uses) if result in u]
        if readers != [last] or [v.id for v in terminator.operands].count(result) != 1 \
                or terminator.operands[p].id != result:
            continue
        found.update((i, p) for i in chain)
    return found


def _update_chain(body: Block, op_uses: list[set[int]], value) -> list[int]:
    """Indices of the updates ``value`` -> update -> update ... in which each operand is read
    by nothing after its update (the last link's result is checked by the caller)."""
    chain = []
    while True:
        updates = [i for i, op in enumerate(body.ops)
                   if op.name == DYNAMIC_UPDATE_SLICE and op.operands[0].id == value.id]
        if len(updates) != 1 or _read_after(body, op_uses, updates[0], value.id):
            return chain
        chain.append(updates[0])
        value = body.ops[updates[0]].results[0]


def _read_after(body: Block, op_uses: list[set[int]], index: int, root: int) -> bool:
    """Whether ``root`` or a value computed from it is read by an op after ``index``."""
    derived = {root}
    for i, op in enumerate(body.ops):
        if i == index:
            continue
        if op_uses[i] & derived:
            if i > index:
                return True
            derived.update(r.id for r in op.results)
    return False


def rewrite_in_place(body: Block) -> tuple[Block, frozenset[int]]:
    """``body`` with its in-place updates renamed, and the carried positions they write
    (whose initial values the while kernel must copy)."""
    found = in_place_positions(body)
    if not found:
        return body, frozenset()
    ops = [dataclasses.replace(op, name=IN_PLACE_UPDATE) if i in found else op
           for i, op in enumerate(body.ops)]
    return Block(body.arguments, ops), frozenset(found.values())
