"""Linear-algebra algorithms written in JAX, for the JAX lowering rules of
``pjrtkit.expansions.jax_linalg`` (``mlir.lower_fun`` turns them into StableHLO). A package of
its own so that loading ``pjrtkit.expansions`` never imports JAX: only these modules do."""
