"""Fast ``stablehlo.while`` loops for the cpu plugin.

- ``inline``: the body's ``func.call`` ops are inlined into the loop's blocks;
- ``ownership``: ``dynamic_update_slice`` on a carry that dies there writes in place;
- ``native``: a loop whose every op the loop compiler supports becomes one Numba function,
  compiled in the background; the interpreted loop runs until it is ready. It is the
  native-loop driver of ``pjrtkit_cpu.loopnest``: ``emitter`` holds the state, ``ops``
  dispatches elementwise ops to the op table and the others to their loop-nest rules (in
  ``ops``, ``shapes``, ``indexing``, ``dot``, ``branches``; fused groups and row programs that
  fusion made in the loop body in ``fused``, each group one loop over its elements).

``PJRTKIT_CPU_NATIVE_LOOPS=0`` turns native loops off.
"""
