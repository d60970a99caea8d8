"""The cpu registry is the reference rule set plus the cpu's own rules: it overrides exactly the
ops whose speed depends on cpu policy (ARCHITECTURE.md, "The reference rule set"), and adds
only its own ops."""
from pjrtkit.reference import REFERENCE

CPU_OVERRIDES = {"stablehlo.while", "stablehlo.dot_general", "stablehlo.dot",
                 "stablehlo.convolution", "stablehlo.if", "stablehlo.case", "stablehlo.reduce"}


def test_the_cpu_rules_are_the_reference_with_the_documented_overrides(registry):
    reference, cpu = REFERENCE.rules, registry.rules
    assert set(reference) <= set(cpu), sorted(set(reference) - set(cpu))
    overridden = {name for name in reference if cpu[name] is not reference[name]}
    assert overridden == CPU_OVERRIDES, "update ARCHITECTURE.md and this list together"
    # Beyond the reference: the cpu's own ops (fused loops) and the rules of its own families
    # (linalg and fft through SciPy, the core's host-callback rule it registers).
    for name in set(cpu) - set(reference):
        module = cpu[name].__module__
        assert name.startswith("pjrtkit_cpu.") or module.startswith(
            ("pjrtkit_cpu.lowering.", "pjrtkit.callbacks")), (name, module)
    assert registry.backend == "pjrtkit_cpu"
    assert registry.payloads is REFERENCE.payloads and registry.dtypes == REFERENCE.dtypes
