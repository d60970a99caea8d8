"""Fast ``stablehlo.while`` loops for the cpu plugin.

- ``inline``: the body's ``func.call`` ops are inlined into the loop's blocks;
- ``ownership``: ``dynamic_update_slice`` on a carry that dies there writes in place;
- ``native``: a loop whose every op the loop compiler supports (``emitter`` holds the state,
  ``ops`` dispatches to the emitters in ``ops``, ``shapes``, ``indexing``, ``dot`` and
  ``mathfns``) becomes one Numba function, compiled in the background; the interpreted loop
  runs until it is ready.

``PJRTKIT_CPU_NATIVE_LOOPS=0`` turns native loops off.
"""
