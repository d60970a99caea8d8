"""The lowering registry: one rule per StableHLO op name, filled with a decorator.

A *rule* runs at compile time. It receives the decoded ``Op`` and a ``LoweringContext`` and
returns a *kernel*: a plain callable that takes the operand arrays (positionally, one per
operand) and returns a tuple with one array per result, of exactly the result's shape and dtype.
All attribute decoding, shape work and kernel choice happen in the rule, never in the kernel.

A backend builds its registry from a base by merging (``base.merged({...})``), not by if-chains;
the usual base is ``pjrtkit.reference.REFERENCE``, XLA's semantics as NumPy rules.
A missing rule is an UNIMPLEMENTED error at compile time that names the op and the backend.

Kernels take and return the backend's *payloads*, whatever they are (NumPy arrays for the
reference rules, device pointers for a GPU backend); the registry's ``payloads``
(``pjrtkit.lowering.payloads.Payloads``) tells the plan builder how to make constants, fold
constant subexpressions and describe results. Nothing here imports NumPy.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pjrtkit.errors import Unimplemented
from pjrtkit.lowering.payloads import Payloads

if TYPE_CHECKING:
    from pjrtkit.stablehlo.ir import Op, Program, Region

Kernel = Callable[..., tuple]

CUSTOM_CALL = "stablehlo.custom_call"
# Not a rule: the plan builder makes constants through the registry's ``Payloads``.
CONSTANT = "stablehlo.constant"


def custom_call_rule(target: str) -> str:
    """The registry key of the rule for ``stablehlo.custom_call`` with ``call_target_name`` target.

    ``@registry.register(custom_call_rule("Qr"))`` implements one custom-call target; a custom
    call whose target has no such rule goes to the generic ``stablehlo.custom_call`` rule, if any.
    """
    return f"{CUSTOM_CALL}@{target}"


class LoweringContext(Protocol):
    """What a rule may ask of the compiler while lowering one op."""

    backend: str
    program: "Program"
    payloads: Payloads

    def compile_region(self, region: "Region") -> Kernel:
        """Lower a region (e.g. a reduce body, a while cond) to a kernel taking the block
        arguments and returning the operands of its terminator as a tuple."""

    def compile_function(self, name: str) -> Kernel:
        """Lower ``func.func @name`` of the program (for ``func.call``) to a kernel."""

    def unimplemented(self, op: "Op", why: str) -> Unimplemented:
        """An UNIMPLEMENTED error naming the op, the backend and ``why``; raise it."""


Rule = Callable[["Op", LoweringContext], Kernel]


class LoweringRegistry:
    """Rules keyed by op name, the dtypes a backend's kernels accept, and how its payloads are
    handled at build time.

    Args:
        backend: the name errors give (the platform name).
        rules: op name -> rule.
        dtypes: the dtypes the kernels accept, as ``TensorType.dtype`` spells them (NumPy
            dtype objects, not scalar types such as ``np.float32``); empty: every dtype is
            left to the rules.
        payloads: the backend's ``Payloads`` (constants, folding, checks); default: constants
            unsupported, folding by running the kernels, results unchecked.
    """

    def __init__(self, backend: str, rules: Mapping[str, Rule] | None = None,
                 dtypes: Iterable[Any] = (), payloads: Payloads | None = None):
        self.backend = backend
        self._rules: dict[str, Rule] = dict(rules or {})
        self.dtypes = frozenset(dtypes)
        scalar_types = [d for d in self.dtypes if isinstance(d, type)]
        if scalar_types:  # np.float32 hashes unlike np.dtype(np.float32): it would never match
            raise TypeError(f"{backend}: dtypes must be dtype objects as TensorType.dtype spells "
                            f"them (np.dtype(np.float32)), not scalar types: {scalar_types}")
        self.payloads = payloads if payloads is not None else Payloads()

    def register(self, *op_names: str) -> Callable[[Rule], Rule]:
        """Decorator: ``@registry.register("stablehlo.add")`` on a rule."""

        def decorate(rule: Rule) -> Rule:
            for name in op_names:
                self._rules[name] = rule
            return rule

        return decorate

    def merged(self, overrides: Mapping[str, Rule], *, backend: str | None = None,
               dtypes: Iterable[Any] | None = None,
               payloads: Payloads | None = None) -> "LoweringRegistry":
        """A new registry: these rules with ``overrides`` on top (``{**base, **overrides}``);
        ``backend``, ``dtypes`` and ``payloads`` are this registry's unless given."""
        return LoweringRegistry(backend or self.backend, {**self._rules, **overrides},
                                self.dtypes if dtypes is None else dtypes,
                                self.payloads if payloads is None else payloads)

    @property
    def rules(self) -> Mapping[str, Rule]:
        return dict(self._rules)

    @property
    def op_names(self) -> frozenset[str]:
        """The op names a plan built with this registry runs: those with a rule (custom-call
        target rules not included) and ``stablehlo.constant``, which the plan builder makes
        through the registry's payloads."""
        prefix = custom_call_rule("")
        return frozenset({CONSTANT, *(name for name in self._rules if not name.startswith(prefix))})

    @property
    def custom_call_targets(self) -> frozenset[str]:
        """The ``call_target_name`` values with a rule of their own (``custom_call_rule``)."""
        prefix = custom_call_rule("")
        return frozenset(name[len(prefix):] for name in self._rules if name.startswith(prefix))

    def __contains__(self, op_name: str) -> bool:
        return op_name in self._rules

    def lookup(self, op: "Op") -> Rule:
        if op.name == CUSTOM_CALL:
            target_rule = self._rules.get(custom_call_rule(op.attributes.get("call_target_name", "")))
            if target_rule is not None:
                return target_rule
        try:
            return self._rules[op.name]
        except KeyError:
            raise Unimplemented(
                f"{self.backend}: no lowering rule for op '{op.name}' ({op.describe()}). "
                f"The backend does not implement this StableHLO op; implement a rule for it "
                f"or run this program on another backend.") from None
