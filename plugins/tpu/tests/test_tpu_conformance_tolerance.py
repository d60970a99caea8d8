"""The conformance suite's allowance for TPU numerics (feature ``bf16_contractions``): only a
backend that declares it gets bfloat16's tolerance on float32 programs with contractions, and
that tolerance still rejects a wrong answer."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from pjrtkit.testing.tolerances import assert_close


def test_only_the_tpu_declares_bf16_contractions():
    from pjrtkit_cpu.plugin import pjrtkit_capabilities as cpu_capabilities
    from pjrtkit_tpu.plugin import pjrtkit_capabilities as tpu_capabilities

    assert "bf16_contractions" in tpu_capabilities().features
    assert "bf16_contractions" not in cpu_capabilities().features


def test_bf16_operands_pass_only_at_reduced_precision_and_wrong_answers_fail():
    rng = np.random.default_rng(0)
    # The suite's shapes are small (contractions of a few elements): bfloat16's tolerance is
    # for those; it does not grow with the contracted length as bf16 rounding errors do.
    a = rng.standard_normal((16, 4)).astype(np.float32)
    b = rng.standard_normal((4, 8)).astype(np.float32)
    exact = a @ b
    rounded = (a.astype(ml_dtypes.bfloat16).astype(np.float32)
               @ b.astype(ml_dtypes.bfloat16).astype(np.float32))
    with pytest.raises(AssertionError):
        assert_close(rounded, exact)
    assert_close(rounded, exact, reduced_precision=True)
    with pytest.raises(AssertionError):
        assert_close(exact * 1.1, exact, reduced_precision=True)
