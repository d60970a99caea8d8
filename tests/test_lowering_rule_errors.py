"""Only an explicit ``Unimplemented`` from a lowering rule means "not supported"; any other
exception is a bug in the rule and is reported as INTERNAL naming the op, the backend and the
exception, so that it is never mistaken for a missing feature."""
import numpy as np
import pytest

from pjrtkit.errors import ErrorCode, Internal, Unimplemented
from pjrtkit.lowering.plan import build_plan
from pjrtkit.testing.programs import lower_program


def _negate_program():
    import jax.numpy as jnp

    return lower_program(lambda x: -x, jnp.ones(3, jnp.float32))


def _rules_with_negate(rule):
    import template_backend

    return template_backend.RULES.merged({"stablehlo.negate": rule}, backend="pjrtkit_ruletest")


def test_a_rule_raising_unimplemented_is_unimplemented():
    def negate(op, ctx):
        raise ctx.unimplemented(op, "negation of this kind is not supported here")

    with pytest.raises(Unimplemented) as info:
        build_plan(_negate_program(), _rules_with_negate(negate))
    assert info.value.code == ErrorCode.UNIMPLEMENTED
    assert "stablehlo.negate" in str(info.value) and "pjrtkit_ruletest" in str(info.value)


@pytest.mark.parametrize("error", [KeyError("dtype"), ValueError("bad shape"),
                                   TypeError("wrong call"), IndexError("out of range"),
                                   NotImplementedError("later"), ZeroDivisionError("oops")])
def test_any_other_exception_from_a_rule_is_internal_naming_the_bug(error):
    def negate(op, ctx):
        raise error

    with pytest.raises(Internal) as info:
        build_plan(_negate_program(), _rules_with_negate(negate))
    message = str(info.value)
    assert info.value.code == ErrorCode.INTERNAL
    assert "pjrtkit_ruletest: bug in the lowering rule for stablehlo.negate" in message
    assert f"{type(error).__name__}: {error}" in message
    assert "stablehlo.negate(tensor<3xfloat32>)" in message  # the op as the program has it
    assert isinstance(info.value.__cause__, type(error))


def test_the_correct_rule_still_compiles_and_runs():
    import template_backend

    plan = build_plan(_negate_program(), template_backend.RULES)
    (out,) = plan(np.array([1, -2, 3], np.float32))
    np.testing.assert_array_equal(out, [-1, 2, -3])
