"""pjrtkit.semantics is the one source of dtype facts and op meanings.

- dtype facts: no shipped module outside the semantics (and the conformance suite's and the
  test helpers' data) imports ml_dtypes or asks NumPy for a type's range or layout, and none
  keeps a module-level collection of dtypes built from NumPy's scalar types: each reads them
  from ``pjrtkit.semantics.dtypes``. The code generators import their type sets from there.
- op meanings: the renderers (NumPy, Numba, Triton) name no StableHLO elementwise op except
  the few they spell whole, each listed here with why; the semantics' definitions reach only
  operations of their one vocabulary.
"""
from __future__ import annotations

import ast
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from pjrtkit.semantics import definitions, dtypes as D, ops
from pjrtkit.semantics.scalar import SCALAR_OPS, Expr, Undefined, schedule

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [ROOT / "core" / "pjrtkit", ROOT / "gpu" / "pjrtkit_gpu",
            *sorted((ROOT / "plugins").glob("*/pjrtkit_*"))]
# Test data and tolerances are about values, not the types' facts.
EXEMPT = [ROOT / "core" / "pjrtkit" / d for d in ("semantics", "conformance", "testing")]
NUMPY_SCALAR_TYPES = {"bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                      "uint64", "float16", "float32", "float64", "complex64", "complex128"}
RENDERERS = {
    ROOT / "core" / "pjrtkit" / "reference" / "elementwise_numpy.py":
        # spelled whole where NumPy does them in fewer passes than their definitions
        {"maximum", "minimum", "sign", "is_finite", "abs", "shift_left", "shift_right_logical",
         "shift_right_arithmetic"},
    ROOT / "plugins" / "cpu" / "pjrtkit_cpu" / "loopnest" / "optable.py":
        # vecmath's float32 versions are named after the ops they compute; "abs" is
        # Python's abs(), fabs's spelling
        {"exponential", "log", "log_plus_one", "exponential_minus_one", "tanh", "logistic",
         "abs"},
    ROOT / "gpu" / "pjrtkit_gpu" / "elementwise_table.py": set(),
}


def _shipped_modules():
    for package in PACKAGES:
        for path in sorted(package.rglob("*.py")):
            if not any(path.is_relative_to(e) for e in EXEMPT):
                yield path


def _dtype_vocabulary(node: ast.AST) -> bool:
    """Whether an expression builds a collection of two or more NumPy scalar types."""
    names = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
             and isinstance(n.value, ast.Name) and n.value.id in ("np", "numpy")
             and n.attr in NUMPY_SCALAR_TYPES}
    return len(names) >= 2 and isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict,
                                                 ast.Call, ast.GeneratorExp, ast.SetComp,
                                                 ast.ListComp, ast.DictComp))


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "ml_dtypes" for a in node.names):
            found.append(f"line {node.lineno}: imports ml_dtypes")
        if isinstance(node, ast.ImportFrom) and node.module == "ml_dtypes":
            found.append(f"line {node.lineno}: imports from ml_dtypes")
        if isinstance(node, ast.Attribute) and node.attr in ("iinfo", "finfo"):
            found.append(f"line {node.lineno}: {node.attr} (use semantics.dtypes.int_range, "
                         f"float_limits, epsilon)")
    for node in tree.body:  # module-level dtype collections
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None \
                and _dtype_vocabulary(node.value):
            found.append(f"line {node.lineno}: a module-level collection of dtypes")
    return found


def test_dtype_facts_come_only_from_the_semantics():
    problems = {str(p.relative_to(ROOT)): v for p in _shipped_modules() if (v := _violations(p))}
    assert not problems, problems


def test_the_checks_above_can_fail():
    """The scanner flags each form it forbids (a vocabulary like the ones the semantics
    replaced: reference/dtypes.py, pjrtkit_gpu/dtypes.py, loopnest/values.py)."""
    source = ("import ml_dtypes\nimport numpy as np\n"
              "FLOATS = frozenset(np.dtype(d) for d in (np.float32, np.float64))\n"
              "LIMIT = np.iinfo(np.int64).max\n")
    path = ROOT / "build" / "semantics_scanner_probe.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(source)
    try:
        assert len(_violations(path)) == 3
    finally:
        path.unlink()


def test_the_code_generators_take_their_dtype_sets_from_the_semantics():
    from pjrtkit_cpu.loopnest import values
    from pjrtkit_gpu import dtypes as gpu_dtypes

    assert values.DTYPES <= set(D.ALL) and values.INT_DTYPES == D.INTS - D.NARROW_INTS
    assert set(gpu_dtypes.SUPPORTED) <= set(D.ALL)
    assert gpu_dtypes.is_float is D.is_float and gpu_dtypes.int_range is D.int_range


def _string_constants(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)}


@pytest.mark.parametrize("path", list(RENDERERS), ids=lambda p: p.name)
def test_renderers_name_no_op_they_do_not_spell_whole(path):
    """What an op means is the semantics'; a renderer names StableHLO elementwise ops only
    where it spells one whole (RENDERERS says which and why)."""
    named = _string_constants(path) & set(ops.ELEMENTWISE)
    # names shared with the scalar vocabulary (add, and, select, sqrt, ...) are operations
    named -= set(SCALAR_OPS)
    named -= {n for n in named if n in definitions.PRIMITIVE_OF.values()}
    assert named <= RENDERERS[path], named - RENDERERS[path]


def test_dtype_facts_match_ml_dtypes_and_numpy():
    for f in D.TABLE:
        if f.kind in (D.SIGNED_KIND, D.UNSIGNED_KIND):
            info = ml_dtypes.iinfo(f.dtype)
            assert (int(info.min), int(info.max)) == D.int_range(f.dtype)
            assert info.bits == f.bits and (int(info.min) < 0) == (f.kind == D.SIGNED_KIND)
        elif f.kind == D.FLOAT_KIND:
            assert ml_dtypes.finfo(f.dtype).bits == f.bits, f.name
        assert D.facts(f.dtype) is f and D.BY_MLIR[f.mlir] == f.dtype
        assert D.BY_PJRT[f.pjrt] == f.dtype


def test_every_definition_reaches_only_the_scalar_vocabulary():
    """Rewriting every op x dtype down to operations nobody defines further leaves only
    SCALAR_OPS (a misspelt operation would be an operation no renderer can ever write)."""
    vocabulary = set(SCALAR_OPS) | set(ops.ELEMENTWISE) | {"flush_denormals"}
    for name, traits in ops.ELEMENTWISE.items():
        for dtype in D.ALL:
            if D.facts(dtype).kind not in traits.kinds:
                continue
            operands = [dtype] * traits.arity
            if name == "select":
                operands[0] = D.BOOL
            result = {"bool": D.BOOL, "real": D.real_part_of(dtype)}.get(traits.result, dtype)
            if name == "convert":
                result = D.FLOAT32 if dtype != D.FLOAT32 else np.dtype(np.int32)
            attributes = {"comparison_direction": "LT" if dtype not in D.COMPLEXES else "EQ",
                          "exponent_bits": 5, "mantissa_bits": 2}
            root = definitions.elementwise(name, operands, result, attributes)
            try:
                order = schedule(root, lambda n: False, definitions.define, "test")
            except Undefined as exc:  # a primitive nobody defines further: fine
                assert exc.op in vocabulary, (name, dtype.name, exc.op)
                continue
            assert {n.op for n in order} <= vocabulary | {"arg", "const"}, (name, dtype)


def test_the_semantics_decline_what_they_do_not_define():
    with pytest.raises(Undefined, match="subtract is not defined on bool"):
        definitions.elementwise("subtract", [D.BOOL, D.BOOL], D.BOOL)
    with pytest.raises(Undefined, match="not an elementwise op"):
        definitions.elementwise("dot_general", [D.FLOAT32, D.FLOAT32], D.FLOAT32)
    assert isinstance(definitions.elementwise("add", [np.int8, np.int8], np.int8), Expr)
