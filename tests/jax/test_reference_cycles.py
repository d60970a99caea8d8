"""Reference cycles on pjrtkit_cpu: what the garbage collector would have to free. JAX's
core_test asks that a first jit call (compile included) and a ``linearize`` leave none, as on
XLA's CPU backend; cached calls of any program must leave none either (a cycle per execution
would be garbage-collector work on every step). In a fresh interpreter: imports and a backend's
first start make cycles of their own."""
from __future__ import annotations


def test_a_first_jit_call_and_cached_calls_leave_no_reference_cycles(run_python):
    out = run_python("""
        import gc
        from functools import partial
        import jax, jax.numpy as jnp

        def garbage(run):
            gc.collect()
            run()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                return gc.collect()
            finally:
                gc.set_debug(0)
                gc.garbage.clear()

        jnp.zeros(3).block_until_ready()  # the backend's start, outside the count
        sum_jit = jax.jit(lambda x: x.sum())
        first = garbage(lambda: sum_jit(jnp.zeros([])).block_until_ready())
        lin = garbage(lambda: partial(jax.linearize, lambda x: x.sum())(jnp.zeros([])))
        programs = [
            (jax.jit(jax.grad(lambda w, x: jnp.tanh(x @ w).sum())), (jnp.ones((8, 4)), jnp.ones((3, 8)))),
            (jax.jit(lambda x: jax.lax.scan(lambda c, a: (c * 2 + a, c), x, jnp.arange(5.0))[0]), (1.0,)),
            (jax.jit(lambda x: jax.lax.while_loop(lambda c: c < 10, lambda c: c + 1, x)), (0,)),
            (jax.jit(lambda p, x: jax.lax.cond(p, jnp.sin, jnp.cos, x)), (True, 1.0)),
        ]
        for f, args in programs:
            jax.block_until_ready(f(*args))
        cached = [garbage(lambda: [jax.block_until_ready(f(*args)) for _ in range(10)])
                  for f, args in programs]
        print(first, lin, cached)
    """, JAX_PLATFORMS="pjrtkit_cpu", PJRTKIT_CPU_FUSED_KERNEL_LIMIT="0")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "0 0 [0, 0, 0, 0]", out.stdout
