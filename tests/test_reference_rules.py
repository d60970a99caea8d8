"""The reference rule set on its own (``pjrtkit.reference.REFERENCE``, no backend's overrides):
the forms a backend may replace (the interpreted while, dot and convolution without a thread
policy, if/case) still compute what XLA's cpu computes, on real programs."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from pjrtkit.reference import REFERENCE
from pjrtkit.testing.programs import run_on_xla_cpu, run_with_registry
from pjrtkit.testing.tolerances import assert_close


def _fori(x):
    return lax.fori_loop(0, 5, lambda i, c: c * 0.5 + i.astype(c.dtype), x)


def _while_with_captures(x, y):
    # y is read by the body without being carried: a capture of the loop's regions.
    return lax.while_loop(lambda c: c[0] < 7, lambda c: (c[0] + 1, c[1] * y + 1.0), (0, x))


def _scan(xs):
    return lax.scan(lambda c, x: (c + x, c * x), jnp.zeros_like(xs[0]), xs)


def _cond(p, x):
    return lax.cond(p > 0, lambda v: jnp.sin(v), lambda v: v * 3.0, x)


def _switch(i, x):
    return lax.switch(i, [lambda v: v + 1.0, lambda v: v * v, lambda v: -v], x)


def _batched_dot(a, b):
    return jnp.einsum("bij,bjk->bik", a, b)


def _convolution(x, k):
    return lax.conv_general_dilated(x, k, (2, 1), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _folded_constants(x):
    return x * jnp.arange(4.0, dtype=x.dtype) + jnp.ones(4, x.dtype).sum()


def _cases(rng):
    f32 = np.float32
    return {
        "fori_loop": (_fori, (rng.normal(size=4).astype(f32),)),
        "while_with_captures": (_while_with_captures, (rng.normal(size=3).astype(f32),
                                                       rng.normal(size=3).astype(f32))),
        "scan": (_scan, (rng.normal(size=(6, 3)).astype(f32),)),
        "cond_true": (_cond, (np.int32(1), rng.normal(size=5).astype(f32))),
        "cond_false": (_cond, (np.int32(-1), rng.normal(size=5).astype(f32))),
        "switch_clamped": (_switch, (np.int32(7), rng.normal(size=5).astype(f32))),
        "batched_dot": (_batched_dot, (rng.normal(size=(2, 3, 5)).astype(f32),
                                       rng.normal(size=(2, 5, 4)).astype(f32))),
        "convolution": (_convolution, (rng.normal(size=(2, 7, 6, 3)).astype(f32),
                                       rng.normal(size=(3, 3, 3, 4)).astype(f32))),
        "folded_constants": (_folded_constants, (rng.normal(size=4).astype(f32),)),
    }


CASE_NAMES = list(_cases(np.random.default_rng(0)))


@pytest.mark.parametrize("name", CASE_NAMES)
def test_the_reference_rules_alone_match_xla(name):
    fn, args = _cases(np.random.default_rng(sum(map(ord, name))))[name]
    ours = run_with_registry(fn, args, REFERENCE)
    want = run_on_xla_cpu(fn, args)
    assert len(ours) == len(want)
    for i, (got, expected) in enumerate(zip(ours, want)):
        assert_close(got, expected, what=f"{name} output {i}")


def test_the_reference_is_a_registry_backends_merge_and_override():
    def no_dot(op, ctx):
        raise ctx.unimplemented(op, "this backend has no dot")

    mine = REFERENCE.merged({"stablehlo.dot_general": no_dot}, backend="pjrtkit_mine")
    assert mine.rules["stablehlo.dot_general"] is no_dot
    assert REFERENCE.rules["stablehlo.dot_general"] is not no_dot  # the base is untouched
    assert mine.payloads is REFERENCE.payloads and mine.dtypes == REFERENCE.dtypes
    a = np.ones((2, 3), np.float32)
    with pytest.raises(Exception, match="pjrtkit_mine.*stablehlo.dot_general.*has no dot"):
        run_with_registry(lambda x, y: x @ y, (a, a.T), mine)
