"""The op list (core/pjrtkit/stablehlo/op_list.txt) is generated from jaxlib's dialects and the
cpu plugin's registry: it fails here when stale, and every op in it is lowered by the cpu
plugin, handled by the core, or listed as knowingly missing with a reason."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from pjrtkit.stablehlo import op_list
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.testing.programs import lower_program


def test_the_op_list_file_is_up_to_date():
    import jaxlib

    if jaxlib.__version__ != "0.10.2":
        pytest.skip(f"op_list.txt lists jaxlib 0.10.2's dialect (the pinned set); this is "
                    f"{jaxlib.__version__}, checked by the test below instead")
    with open(op_list.LIST_PATH) as listed:
        assert listed.read() == op_list.generate(), (
            "op_list.txt is stale: run python -m pjrtkit.stablehlo.op_list --write")


def test_every_op_is_lowered_handled_or_knowingly_missing():
    lowered = op_list.cpu_lowered_ops()
    unknown = [op for op in op_list.dialect_ops() if op_list.status(op, lowered) == "unknown"]
    assert not unknown, f"ops neither lowered by pjrtkit_cpu nor listed in KNOWN_MISSING: {unknown}"


def test_known_missing_names_only_real_ops_that_have_no_rule():
    ops = set(op_list.dialect_ops())
    lowered = op_list.cpu_lowered_ops()
    assert not set(op_list.KNOWN_MISSING) - ops, "KNOWN_MISSING names ops jaxlib does not have"
    now_lowered = sorted(set(op_list.KNOWN_MISSING) & lowered)
    assert not now_lowered, f"pjrtkit_cpu lowers these now; drop from KNOWN_MISSING: {now_lowered}"


def test_the_list_fails_on_an_op_nobody_handles():
    assert op_list.status("stablehlo.some_new_op", frozenset()) == "unknown"
    assert op_list.status("stablehlo.add", frozenset({"stablehlo.add"})) == "cpu"


def test_chlo_ops_never_reach_the_loader():
    """Why the list holds no chlo ops: jaxlib legalizes them while serializing the artifact."""
    x = np.linspace(0.1, 0.9, 5, dtype=np.float32)

    def special_functions(v):
        return (jax.scipy.special.erf(v), jax.lax.lgamma(v), jax.lax.digamma(v),
                jax.scipy.special.erfinv(v), jax.numpy.arcsinh(v), jax.numpy.tan(v),
                jax.lax.top_k(v, 2)[0], jax.lax.erf_inv(v), jax.lax.bessel_i1e(v))

    assert "chlo." in jax.jit(special_functions).lower(x).as_text()  # JAX does emit CHLO
    names = {op.name for op in walk_ops(lower_program(special_functions, x))}
    assert not [n for n in names if n.startswith("chlo.")]
