"""LoweringRegistry: custom-call targets resolve to their own rule before the generic one."""
from __future__ import annotations

import pytest

from pjrtkit.errors import Unimplemented
from pjrtkit.lowering.registry import LoweringRegistry, custom_call_rule
from pjrtkit.stablehlo.loader import load_program

PROGRAM = """
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %y = stablehlo.custom_call @{target}(%x) : (tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}
"""


def custom_call_op(target: str):
    program = load_program(PROGRAM.replace("{target}", target))
    return next(op for op in program.main.body.entry.ops if op.name == "stablehlo.custom_call")


def target_rule(op, ctx):
    return "target"


def generic_rule(op, ctx):
    return "generic"


def test_a_target_rule_wins_over_the_generic_custom_call_rule():
    registry = LoweringRegistry("toy", {custom_call_rule("Known"): target_rule,
                                        "stablehlo.custom_call": generic_rule})
    assert registry.lookup(custom_call_op("Known")) is target_rule
    assert registry.lookup(custom_call_op("Other")) is generic_rule


def test_an_unknown_target_without_a_generic_rule_is_unimplemented():
    registry = LoweringRegistry("toy", {custom_call_rule("Known"): target_rule})
    with pytest.raises(Unimplemented, match="stablehlo.custom_call"):
        registry.lookup(custom_call_op("Other"))
