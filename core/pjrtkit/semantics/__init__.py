"""What each op and element type means, said once, for every code generator.

- ``dtypes``: the element types and their facts (kind, bits, StableHLO and PJRT names, the type
  XLA's CPU backend computes each in);
- ``ops``: op traits (arity, the kinds an op is defined on, exact, transcendental, which
  denormals XLA keeps) and the op categories other passes read (transcendental, effectful);
- ``scalar``: the scalar expression language and ``schedule``, which rewrites an expression
  into the operations one renderer spells;
- ``definitions`` (with ``definitions_complex``): each StableHLO elementwise op's meaning as a
  scalar expression (XLA's NaN, infinity, overflow, shift and rounding rules);
- ``recipes``: primitive operations (rounding, transcendentals, bit counts) in simpler ones,
  for renderers that lack them.

The renderers: NumPy (``pjrtkit.reference.elementwise_numpy``), the cpu plugin's Numba emitter
(``pjrtkit_cpu.loopnest.optable``) and the GPU plugins' Triton emitter
(``pjrtkit_gpu.elementwise_table``). Each spells operations; none says what an op means.
"""
