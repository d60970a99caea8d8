"""The cpu plugin declares its capabilities (pjrtkit_capabilities) from its rule registry, so
the declaration cannot drift from what compiles."""
from pjrtkit.discovery import load_backend
from pjrtkit.types import FEATURES


def test_pjrtkit_capabilities_of_cpu_come_from_its_registry():
    from pjrtkit_cpu.lowering import RULES

    caps = load_backend("cpu").capabilities()
    assert caps.dtypes == {dtype.name for dtype in RULES.dtypes}
    assert {"float32", "bfloat16", "int64", "bool"} <= caps.dtypes
    # every PJRT buffer type ml_dtypes holds has kernels now (issue 9)
    assert {"complex64", "complex128", "int4", "uint2", "float8_e4m3fn", "float8_e8m0fnu",
            "float4_e2m1fn"} <= caps.dtypes
    assert caps.ops == {name for name in RULES.op_names if not name.startswith("pjrtkit_cpu.")}
    assert {"stablehlo.add", "stablehlo.while", "stablehlo.dot_general"} <= caps.ops
    assert not any("@" in name for name in caps.ops)  # custom-call target rules are not ops
    assert caps.custom_call_targets == RULES.custom_call_targets
    assert "Sharding" in caps.custom_call_targets
    assert caps.features == {"compile_only_topologies", "multiple_devices",
                             "partitioned_programs"} <= FEATURES
