"""pjrtkit_jax_lowering_rules: JAX lowering rules a plugin contributes for its platform, through
the facade (flattened, checked) and registered with JAX by the core after the platform."""
import logging
import types

import jax
import numpy as np
import pytest
from jax.extend.core import Primitive
from jax.interpreters import mlir

from pjrtkit import hookimpl
from pjrtkit.backend import Backend
from pjrtkit.errors import InvalidArgument
from pjrtkit.jax_lowering import register_platform_lowering_rules
from pjrtkit.types import JaxLoweringRule, PlatformInfo


def doubling_primitive(name):
    """A primitive JAX has no lowering for anywhere, and a rule lowering it to x * 2."""
    primitive = Primitive(name)
    primitive.def_abstract_eval(lambda x: x)
    primitive.def_impl(lambda x: x * 2)
    return primitive, mlir.lower_fun(lambda x: x * 2, multiple_results=False)


def backend_with(platform, *answers):
    """A Backend of a template plugin whose pjrtkit_jax_lowering_rules implementations (one
    module per answer) return ``answers``."""
    modules = []
    for i, answer in enumerate(answers):
        module = types.ModuleType(f"rules_{i}")
        module.pjrtkit_jax_lowering_rules = hookimpl(lambda answer=answer: answer)
        modules.append(module)
    platform_module = types.ModuleType("template")
    platform_module.pjrtkit_platform = hookimpl(
        lambda: PlatformInfo(name=platform, version="test", device_kind="template"))
    backend = Backend("template", platform_module, "test")
    for module in modules:
        backend.plugin_manager.register(module)
    return backend


def test_pjrtkit_jax_lowering_rules_are_flattened_over_implementations():
    first, rule = doubling_primitive("pjrtkit_test_first")
    second, _ = doubling_primitive("pjrtkit_test_second")
    backend = backend_with("pjrtkit_template", [JaxLoweringRule(first, rule)],
                           (JaxLoweringRule(second, rule),), [])
    assert {r.primitive for r in backend.jax_lowering_rules()} == {first, second}
    assert backend_with("pjrtkit_template").jax_lowering_rules() == ()


def test_a_record_of_another_type_or_a_primitive_twice_is_invalid():
    primitive, rule = doubling_primitive("pjrtkit_test_twice")
    with pytest.raises(InvalidArgument, match="yielded tuple; yield pjrtkit.types.JaxLoweringRule"):
        backend_with("pjrtkit_template", [(primitive, rule)]).jax_lowering_rules()
    with pytest.raises(InvalidArgument, match="pjrtkit_test_twice twice"):
        backend_with("pjrtkit_template", [JaxLoweringRule(primitive, rule)],
                     [JaxLoweringRule(primitive, rule)]).jax_lowering_rules()


def test_the_core_registers_the_rules_for_the_platform_only():
    jax.devices()  # JAX registers the installed platforms (pjrtkit_cpu among them)
    primitive, rule = doubling_primitive("pjrtkit_test_doubling")
    backend = backend_with("pjrtkit_cpu", [JaxLoweringRule(primitive, rule)])
    assert register_platform_lowering_rules(backend) == 1

    x = np.arange(4.0, dtype=np.float32)
    text = jax.jit(primitive.bind).trace(x).lower(lowering_platforms=("pjrtkit_cpu",)).as_text()
    assert "stablehlo.multiply" in text
    with jax.default_device(jax.devices("pjrtkit_cpu")[0]):
        np.testing.assert_array_equal(jax.jit(primitive.bind)(x), x * 2)
    with pytest.raises(NotImplementedError, match="pjrtkit_test_doubling"):
        jax.jit(primitive.bind).trace(x).lower(lowering_platforms=("cpu",))


def test_a_rule_jax_refuses_is_logged_and_skipped(caplog):
    primitive, rule = doubling_primitive("pjrtkit_test_unknown_platform")
    backend = backend_with("pjrtkit_no_such_platform", [JaxLoweringRule(primitive, rule)])
    with caplog.at_level(logging.WARNING, logger="pjrtkit.jax_lowering"):
        assert register_platform_lowering_rules(backend) == 0
    assert "pjrtkit_test_unknown_platform not registered" in caplog.text
    broken = backend_with("pjrtkit_no_such_platform", ["not a record"])
    with caplog.at_level(logging.WARNING, logger="pjrtkit.jax_lowering"):
        assert register_platform_lowering_rules(broken) == 0
    assert "no JAX lowering rules registered" in caplog.text
