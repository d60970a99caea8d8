"""Op traits: what kind of op each StableHLO op is, said once.

``ELEMENTWISE`` holds one ``OpTraits`` per elementwise op: how many operands, which kinds of
element type it is defined on, what its result is, and the facts that decide how it may be
computed (exact in any precision, transcendental, which denormals XLA's CPU backend keeps).
The code generators, the cost model and the fusion passes read their op categories from here;
the ops' meanings are in ``definitions``.
"""
from __future__ import annotations

import dataclasses

from pjrtkit.semantics.dtypes import (BOOL_KIND, COMPLEX_KIND, FLOAT_KIND, SIGNED_KIND,
                                      UNSIGNED_KIND)

PREFIX = "stablehlo."

_B, _S, _U, _F, _C = BOOL_KIND, SIGNED_KIND, UNSIGNED_KIND, FLOAT_KIND, COMPLEX_KIND
_INTS = frozenset({_S, _U})
_NUMBERS = frozenset({_S, _U, _F, _C})
_ALL = frozenset({_B, _S, _U, _F, _C})


@dataclasses.dataclass(frozen=True)
class OpTraits:
    """What kind of op one StableHLO elementwise op is (its short name: ``"add"``)."""

    name: str
    arity: int
    kinds: frozenset           # dtype kinds of its (typed) operand it is defined on
    result: str = "same"       # "same" dtype as the operand, "bool" (a predicate), "real" part
    typed_operand: int = 0     # the operand whose dtype the op is defined on (clamp: 1)
    attributes: tuple = ()     # the attributes its meaning depends on
    # The result is one of the operands or a value exact in the operand's type, so a narrow
    # float may compute it in its own type (no widening and rounding back).
    exact: bool = False
    # Computed by a math-library function (counted by the cost model; libraries differ in
    # the last bits, so results are compared with the dtype's tolerance).
    transcendental: bool = False
    correctly_rounded: bool = False  # a transcendental IEEE 754 requires correctly rounded
    # Where XLA's CPU backend does not flush bfloat16/float8_e8m0fnu denormals to zero
    # (measured): remainder's dividend and result and power's operands (libm, which the
    # flags do not reach; remainder's divisor is flushed); expm1, sine, tan and tanh return
    # tiny inputs as they are; negate and abs only flip or clear the sign bit; e8m0 has no
    # sign, so abs and sign only read NaN. ``keeps_denormal_operands``: the indices of the operands kept.
    keeps_denormal_operands: tuple = ()
    keeps_denormal_result: bool = False
    e8m0_keeps_denormals: bool = False

    @property
    def op(self) -> str:
        return PREFIX + self.name


def _traits(names: str, arity: int, kinds, **options) -> dict[str, OpTraits]:
    if options.get("keeps_denormal_operands") is True:
        options["keeps_denormal_operands"] = tuple(range(arity))
    return {name: OpTraits(name, arity, frozenset(kinds), **options) for name in names.split()}


ELEMENTWISE: dict[str, OpTraits] = {
    **_traits("add multiply", 2, _ALL),
    **_traits("subtract divide", 2, _NUMBERS),
    **_traits("remainder", 2, {_S, _U, _F}, keeps_denormal_operands=(0,),
              keeps_denormal_result=True),
    **_traits("power", 2, _NUMBERS, transcendental=True, keeps_denormal_operands=True),
    **_traits("maximum minimum", 2, {_B, _S, _U, _F}, exact=True),
    **_traits("atan2", 2, {_F}, transcendental=True),
    **_traits("and or xor", 2, {_B, _S, _U}),
    **_traits("shift_left shift_right_arithmetic shift_right_logical", 2, _INTS),
    **_traits("abs", 1, {_S, _U, _F, _C}, result="real", exact=True,
              keeps_denormal_operands=True, keeps_denormal_result=True,
              e8m0_keeps_denormals=True),
    **_traits("negate", 1, _NUMBERS, exact=True, keeps_denormal_operands=True,
              keeps_denormal_result=True),
    **_traits("sign", 1, _NUMBERS, exact=True, e8m0_keeps_denormals=True),
    **_traits("not", 1, {_B, _S, _U}),
    **_traits("popcnt count_leading_zeros", 1, _INTS),
    # e8m0: XLA's ceil of its one denormal, 2**-127, is 1 (floor and rounding give 0, not
    # representable, either way)
    **_traits("floor ceil round_nearest_even round_nearest_afz", 1, {_F}, exact=True,
              e8m0_keeps_denormals=True),
    **_traits("sqrt", 1, {_F, _C}, transcendental=True, correctly_rounded=True),
    **_traits("rsqrt exponential log log_plus_one logistic cosine", 1, {_F, _C},
              transcendental=True),
    # XLA's approximations return a tiny input as it is (measured on bfloat16 and e8m0)
    **_traits("exponential_minus_one sine tan tanh", 1, {_F, _C}, transcendental=True,
              keeps_denormal_operands=True, keeps_denormal_result=True),
    **_traits("cbrt", 1, {_F}, transcendental=True),
    # predicates read their operands widened exactly (no denormal is flushed)
    **_traits("is_finite", 1, {_F}, result="bool", keeps_denormal_operands=True),
    **_traits("compare", 2, _ALL, result="bool", keeps_denormal_operands=True,
              attributes=("comparison_direction", "compare_type")),
    # rounds to a float format of exponent_bits and mantissa_bits (XLA's ReducePrecision)
    **_traits("reduce_precision", 1, {_F}, attributes=("exponent_bits", "mantissa_bits"),
              keeps_denormal_operands=True, keeps_denormal_result=True),
    **_traits("select", 3, _ALL, typed_operand=1),
    # bfloat16 and e8m0 operands are flushed, as for maximum and minimum (measured)
    **_traits("clamp", 3, {_B, _S, _U, _F}, typed_operand=1, exact=True),
    # every element type to every other; the result's dtype is the op's
    **_traits("convert", 1, _ALL),
}

# Full StableHLO names of the transcendental elementwise ops (the cost model's count).
TRANSCENDENTAL = frozenset(t.op for t in ELEMENTWISE.values() if t.transcendental)

# Ops whose order is observable: passes that reorder ops keep these in order.
EFFECTFUL = frozenset({
    "stablehlo.custom_call", "stablehlo.infeed", "stablehlo.outfeed", "stablehlo.send",
    "stablehlo.recv", "stablehlo.after_all", "stablehlo.create_token", "stablehlo.rng",
    "stablehlo.rng_bit_generator", "stablehlo.optimization_barrier", "stablehlo.while",
    "stablehlo.if", "stablehlo.case", "func.call", "stablehlo.composite",
})


def traits(op_name: str) -> OpTraits | None:
    """The traits of an elementwise op, by full (``stablehlo.add``) or short name."""
    return ELEMENTWISE.get(op_name.removeprefix(PREFIX))
