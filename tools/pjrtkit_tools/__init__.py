"""pjrtkit's development tools (distribution ``pjrtkit-tools``, not shipped with a plugin).

    fuzz_programs, fuzz_abi, fuzz_children   the program and C ABI fuzz harnesses (make fuzz)
    soak                                     the leak soak (make soak)
    dtype_sweep                              every lax op x every dtype vs XLA's CPU backend
    attribute_kinds                          every MLIR attribute kind the loader meets
    jax_tests                                JAX's own test files (pjrtkit jax-tests)

A plain ``pip install pjrtkit`` imports none of them; ``pip install pjrtkit[dev]`` (what
``make`` installs) brings them, and the ``pjrtkit jax-tests`` command with them.
"""
