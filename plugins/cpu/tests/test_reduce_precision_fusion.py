"""A lone ``reduce_precision`` is worth a fused loop (``groups.MULTI_PASS_OPS``): pjrtkit_tpu
rounds every float32 dot operand to bfloat16 with one. Fused and per-op, float32 rounded to
bfloat16's bits equals the two converts through bfloat16 (ml_dtypes) for every number, and
XLA's result, NaN staying NaN."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from jax import lax

from pjrtkit.testing.programs import lower_program, run_on_xla_cpu

from pjrtkit_cpu.fusion import cache
from pjrtkit_cpu.fusion.rewrite import FUSED_OP
from pjrtkit_cpu.lowering import RULES
from pjrtkit_cpu.plugin import compile_with_rules


def _to_bfloat16_bits(x):
    # (the sort keeps a small program from being one whole-program loop: the per-op path)
    return lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7), lax.sort(x)


@pytest.mark.parametrize("size, fused", [(1 << 17, True), (5120, True), (1000, False)])
def test_rounding_to_bfloat16_fuses_alone_and_matches_the_converts(size, fused):
    rng = np.random.default_rng(size)
    x = rng.integers(0, 2 ** 32, size, dtype=np.uint64).astype(np.uint32).view(np.float32)
    compiled = compile_with_rules(lower_program(_to_bfloat16_bits, x), RULES)
    names = [op.name for _k, _i, _o, op in compiled.executable.plan.steps]
    assert (FUSED_OP in names) == fused, names
    execute = compiled.executable.execute
    execute([[x]], [None])
    cache.wait_all(300)
    ours = np.asarray(execute([[x]], [None])[0][0])
    with np.errstate(invalid="ignore"):
        chain = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    xla = run_on_xla_cpu(_to_bfloat16_bits, [x])[0]
    nan = np.isnan(x)
    assert nan.any() and np.isnan(ours[nan]).all()
    assert np.array_equal(ours[~nan].view(np.uint32), chain[~nan].view(np.uint32))
    assert np.array_equal(ours[~nan].view(np.uint32), xla[~nan].view(np.uint32))
