"""Plan building on real programs with the cpu plugin's rules: plans of one shape in one build
share compiled code, and each runs with its own kernels."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from pjrtkit.lowering.plan import PlanBuilder, build_plan
from pjrtkit.testing.programs import lower_program, run_on_xla_cpu


def _three_reductions(x):
    return x.sum(0), x.sum(1), x.max(0), jnp.prod(x, 1)


def test_regions_of_one_shape_compile_once_and_keep_their_own_kernels():
    from pjrtkit_cpu.lowering import RULES

    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    program = lower_program(_three_reductions, x)
    builder = PlanBuilder(program, RULES)
    plan = builder.compile_function(program.entry)
    sources = [source for _, source in builder._codes]
    # main + one region per reduce, but the two sums' bodies (add) are one source
    reduces = sum(op.name == "stablehlo.reduce" for op in program.main.body.entry.ops)
    assert reduces == 4 and len(sources) < reduces + 1
    assert len(set(sources)) == len(sources)
    got = plan(x)
    want = run_on_xla_cpu(_three_reductions, (x,))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)
    # a second build compiles again (no cache outlives a build) and gives the same plan source
    again = build_plan(program, RULES)
    assert again.source == plan.source and again._run is not plan._run
