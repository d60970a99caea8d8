"""The cpu plugin's one Numba loop-nest emitter: scalar code for StableHLO ops inside loops.

Three drivers generate Numba kernels from StableHLO, and all three build them from the pieces
of this package:

- ``values``: where a value lives in generated code, dtype names and the one literal formatter
  and strides helper;
- ``optable``: the op table, one code-generation rule per elementwise StableHLO op (the scalar
  statements computing one element of its result from its operands' elements), rendered from
  ``pjrtkit.semantics``: the table spells scalar operations in Numba, the semantics say what
  each op computes;
- ``module``: the one njit module builder (imports of the helpers the rules call, the njit
  decorator, the disk-cache-friendly source text).

The drivers: fused groups (``fusion.kernel`` + ``fusion.codegen``: one loop over the group's
elements or rows), row programs (``fusion.rows``: one loop over rows running several fused
stages) and native while loops (``loops.native``: a whole loop, whose elementwise ops and fused
groups run as loops over their elements). Each exposes ``OP_TABLE``, the table it emits with.
"""
