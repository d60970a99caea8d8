"""A scatter of several operands as one scatter per operand, when its combiner combines each
operand only with its own update (what XLA computes then is the same per operand).

The complex expansion turns a scatter of complex values into a scatter of two operands (real
and imaginary parts) whose combiner is the pair's (a replace returns both updates, an add adds
the parts pairwise): JAX's generic LU, ``.at[...].set`` and ``.at[...].add`` on complex arrays
emit those. A backend whose scatter rule takes one operand hands such a scatter to
``scatter_per_operand`` from its rule (``expansions.lower_by_expansion``). A combiner that mixes
operands (a variadic arg-max, for one) is not separable: ``separable_combiner`` says so and the
rule stays UNIMPLEMENTED for it.

With indices that repeat and a combiner that is not commutative (a replace), which update wins
is unspecified in StableHLO per operand too; the per-operand scatters keep each operand's
result one that XLA may give.
"""
from __future__ import annotations

from pjrtkit.expansions.build import OpBuilder, region
from pjrtkit.stablehlo.ir import Op, free_uses


def _dependencies(block) -> dict[int, frozenset[int]]:
    """For each value of ``block`` (arguments and op results), the block arguments it reads,
    as ids."""
    deps: dict[int, frozenset[int]] = {a.id: frozenset({a.id}) for a in block.arguments}
    for op in block.ops:
        reads = frozenset().union(*(deps.get(use, frozenset()) for use in free_uses(op)))
        for result in op.results:
            deps[result.id] = reads
    return deps


def separable_combiner(op: Op) -> bool:
    """Whether the scatter's combiner computes result k from its operand k and update k only."""
    count = len(op.results)
    block = op.regions[0].entry
    returned = block.ops[-1].operands if block.ops else ()
    if len(block.arguments) != 2 * count or len(returned) != count:
        return False
    deps = _dependencies(block)
    for k, value in enumerate(returned):
        own = {block.arguments[k].id, block.arguments[count + k].id}
        if not deps.get(value.id, frozenset()) <= own:
            return False
    return True


def _ops_for(block, value) -> list:
    """The block's ops ``value`` is computed by, in block order."""
    needed = {value.id}
    kept = []
    for op in reversed(block.ops[:-1]):
        if any(r.id in needed for r in op.results):
            kept.append(op)
            needed.update(free_uses(op))
    return kept[::-1]


def scatter_per_operand(op: Op, program=None) -> list[Op]:
    """A scatter of several operands with a separable combiner as one scatter per operand
    (the op itself when it has one operand or its combiner mixes operands)."""
    count = len(op.results)
    if count == 1 or not separable_combiner(op):
        return [op]
    inputs, indices, updates = op.operands[:count], op.operands[count], op.operands[count + 1:]
    block = op.regions[0].entry
    returned = block.ops[-1].operands
    b = OpBuilder(op.location)
    for k in range(count):
        combiner = region((block.arguments[k], block.arguments[count + k]),
                          _ops_for(block, returned[k]), (returned[k],), op.location)
        b.emit_into("stablehlo.scatter", (inputs[k], indices, updates[k]), (op.results[k],),
                    op.attributes, (combiner,))
    return b.ops
