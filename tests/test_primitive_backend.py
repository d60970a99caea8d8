"""The primitive-only backend (the package ``tests/plugins/primitive_backend/``, one module per op
family): it implements exactly the primitive set it declares, on payloads of its own, with
nothing from ``pjrtkit.reference``, and reaches JAX's surface through the core's expansions
(complex numbers, narrow types, convolutions, random bits, ... are rewritten into its set)."""
from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np

from pjrtkit.backend import Backend
from pjrtkit.testing.programs import portable_artifact
from pjrtkit.stablehlo.loader import load_program
from pjrtkit.types import CompileOptions

import primitive_backend

PLUGINS = pathlib.Path(__file__).parent / "plugins"

# The declared primitive set, spelled out: a rule added or removed must be added here too.
OPS = [
    "func.call", "stablehlo.abs", "stablehlo.add", "stablehlo.after_all", "stablehlo.and",
    "stablehlo.atan2", "stablehlo.bitcast_convert", "stablehlo.broadcast_in_dim",
    "stablehlo.case", "stablehlo.cbrt", "stablehlo.ceil", "stablehlo.clamp", "stablehlo.compare",
    "stablehlo.composite", "stablehlo.concatenate", "stablehlo.constant", "stablehlo.convert",
    "stablehlo.cosine", "stablehlo.count_leading_zeros", "stablehlo.create_token",
    "stablehlo.divide", "stablehlo.dot_general", "stablehlo.dynamic_slice",
    "stablehlo.dynamic_update_slice", "stablehlo.exponential", "stablehlo.exponential_minus_one",
    "stablehlo.floor", "stablehlo.gather", "stablehlo.if", "stablehlo.iota",
    "stablehlo.is_finite", "stablehlo.log", "stablehlo.log_plus_one", "stablehlo.logistic",
    "stablehlo.maximum", "stablehlo.minimum", "stablehlo.multiply", "stablehlo.negate",
    "stablehlo.not", "stablehlo.optimization_barrier", "stablehlo.or", "stablehlo.pad",
    "stablehlo.popcnt", "stablehlo.power", "stablehlo.reduce", "stablehlo.reduce_window",
    "stablehlo.remainder", "stablehlo.reshape", "stablehlo.reverse",
    "stablehlo.round_nearest_afz", "stablehlo.round_nearest_even", "stablehlo.rsqrt",
    "stablehlo.scatter", "stablehlo.select", "stablehlo.shift_left",
    "stablehlo.shift_right_arithmetic", "stablehlo.shift_right_logical", "stablehlo.sign",
    "stablehlo.sine", "stablehlo.slice", "stablehlo.sort", "stablehlo.sqrt",
    "stablehlo.subtract", "stablehlo.tan", "stablehlo.tanh", "stablehlo.transpose",
    "stablehlo.while", "stablehlo.xor"]
TARGETS = ["ApproxTopK", "pjrtkit_host_callback"]
DTYPES = ["bfloat16", "bool", "float16", "float32", "float64", "int16", "int32", "int64", "int8",
          "uint16", "uint32", "uint64", "uint8"]


def test_the_registry_is_exactly_the_declared_primitive_set():
    declared = primitive_backend.pjrtkit_primitive_set()
    assert sorted(primitive_backend.RULES.op_names) == OPS == sorted(declared.ops)
    assert sorted(primitive_backend.RULES.custom_call_targets) == TARGETS
    assert sorted(declared.custom_call_targets) == TARGETS
    assert sorted(declared.dtypes) == DTYPES
    # nothing complex, narrow, fft or linear algebra: those come from the expansions
    assert not {"stablehlo.convolution", "stablehlo.fft", "stablehlo.cholesky",
                "stablehlo.triangular_solve", "stablehlo.rng_bit_generator",
                "stablehlo.complex", "stablehlo.real", "stablehlo.imag"} & set(OPS)


PACKAGE = pathlib.Path(primitive_backend.__file__).parent
FAMILIES = ["contraction", "control_flow", "elementwise", "indexing", "reductions", "shape"]


def test_every_family_module_is_imported_by_the_package():
    modules = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert modules == sorted(["__init__", "payloads", *FAMILIES])
    # importing the package registered every family's rules (checked above against OPS)
    assert all(getattr(primitive_backend, f).__name__ == f"primitive_backend.{f}"
               for f in FAMILIES)


def test_its_rules_import_nothing_from_the_reference():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) == len(FAMILIES) + 2
    for path in modules:
        tree = ast.parse(path.read_text())
        imports = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        imported = {node.module for node in imports}
        imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for a in node.names}
        assert not [m for m in imported if m and m.startswith("pjrtkit.reference")], \
            (path.name, imported)
        if path.name != "__init__.py":  # family modules import from siblings, never the package
            assert not [n for n in imports if n.level and n.module is None], path.name
            assert not [m for m in imported if m and m.startswith("primitive_backend")], \
                path.name


def test_its_payloads_are_its_own_and_complex_programs_reach_it_as_pairs():
    backend = Backend("primitive", primitive_backend)
    assert "complex64" in backend.capabilities().dtypes  # widened by the expansions
    z = (np.arange(4) + 1j * np.arange(4)[::-1]).astype(np.complex64)
    program = load_program(portable_artifact(lambda a: a * a + 1j, z))
    options = CompileOptions(num_replicas=1, num_partitions=1, device_assignment=None,
                             use_spmd_partitioning=False)
    compiled = backend.compile(program=program, options=options, devices=())
    argument = backend.transfer_to_device(array=z, device=None, memory_kind="device")
    assert type(argument) is primitive_backend.Tensor
    (result,) = compiled.executable.execute([[argument]], [None])[0]
    assert type(result) is primitive_backend.Tensor
    np.testing.assert_allclose(result.data, z * z + 1j, rtol=1e-6)


# A sample of the JAX layer that spans what the expansions bring (the whole layer is measured by
# the conformance run the docs describe): complex, float8 and int4 types, a convolution,
# random bits from rng_bit_generator, host callbacks, sort and a training program.
SAMPLE = ["jax.complex.multiply[complex64-3x4]", "jax.complex.matmul[complex128-3x4]",
          "jax.complex.sum[*", "jax.dtype.add[float8_e4m3fn-3x4]",
          "jax.dtype.convert_from_float32[int4-3x4]", "jax.convolution.conv2d_grouped[*",
          "jax.random.impl_rbg_normal[*", "jax.callbacks.pure_callback[*",
          "jax.sort.argsort[*", "jax.program.mlp_adam[*", "jax.cumulative.cumprod[*",
          "jax.indexing.take_along_axis[*"]

RUN = textwrap.dedent("""
    import sys
    from pjrtkit.backend import Backend
    from pjrtkit.conformance.runner import main_for_backend
    import primitive_backend
    sys.exit(main_for_backend(Backend("primitive", primitive_backend), sys.argv[1:]))
""")


def test_a_sample_of_the_jax_layer_passes_through_the_expansions(tmp_path):
    report = tmp_path / "primitive.json"
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "PJRTKIT_BACKENDS")}
    env["PYTHONPATH"] = str(PLUGINS) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", RUN, "--layer", "jax", "--json", str(report),
                           "--check", *SAMPLE], capture_output=True, text=True, timeout=900,
                          env=env)
    assert report.exists(), done.stderr[-4000:]
    outcomes = {c["id"]: (c["outcome"], c.get("detail"), c.get("expected"), c.get("actual"))
                for c in json.loads(report.read_text())["checks"]}
    assert len(outcomes) >= len(SAMPLE)
    assert {i: o for i, o in outcomes.items() if o[0] != "PASS"} == {}, done.stdout[-4000:]
