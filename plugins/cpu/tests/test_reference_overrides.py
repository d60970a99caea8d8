"""The cpu registry is the reference rule set plus the cpu's own rules: it overrides exactly the
ops whose speed depends on cpu policy (ARCHITECTURE.md, "The reference rule set"), and adds
only its own ops."""
from pjrtkit.reference import REFERENCE

CPU_OVERRIDES = {"stablehlo.while", "stablehlo.dot_general", "stablehlo.dot",
                 "stablehlo.convolution"}


def test_the_cpu_rules_are_the_reference_with_the_documented_overrides(registry):
    reference, cpu = REFERENCE.rules, registry.rules
    assert set(reference) <= set(cpu), sorted(set(reference) - set(cpu))
    overridden = {name for name in reference if cpu[name] is not reference[name]}
    assert overridden == CPU_OVERRIDES, "update ARCHITECTURE.md and this list together"
    assert all(name.startswith("pjrtkit_cpu.") for name in set(cpu) - set(reference))
    assert registry.backend == "pjrtkit_cpu"
    assert registry.payloads is REFERENCE.payloads and registry.dtypes == REFERENCE.dtypes
