"""``jax.jit(..., compiler_options=...)`` on pjrtkit_cpu: XLA's own options are accepted, a name
that is no XLA option or a value of the wrong type is refused with XLA's message, as XLA's CPU
backend refuses them (compared in this process)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest


def _f(x):
    return jnp.sqrt(x ** 2) + 1.0


def _compile(device, options):
    lowered = jax.jit(_f).lower(jax.device_put(np.float32(1), device))
    return lowered.compile(compiler_options=options)


def _outcome(device, options):
    try:
        return ("value", float(_compile(device, options)(jax.device_put(np.float32(-2), device))))
    except jax.errors.JaxRuntimeError as exc:
        return ("refused", str(exc))


@pytest.mark.parametrize("options", [
    {"xla_embed_ir_in_executable": True, "xla_dump_max_hlo_modules": 200,
     "xla_gpu_auto_spmd_partitioning_memory_budget_ratio": 0.5},
    {"exec_time_optimization_effort": 0.0},  # accepted by jax 0.10's XLA, not by 0.11's
], ids=["debug-options", "build-option"])
def test_options_get_the_answer_xla_gives(devices, options):
    ours, theirs = (_outcome(device, options) for device in devices)
    assert ours == theirs
    if options.get("xla_embed_ir_in_executable"):
        assert ours == ("value", 3.0)


@pytest.mark.parametrize("options, message", [
    ({"invalid_key": "invalid_value"}, "No such compile option: 'invalid_key'"),
    ({"xla_embed_ir_in_executable": "invalid_value"}, "is not a valid bool value"),
    ({"exec_time_compilation_effort": 0.0}, "No such compile option"),
], ids=["unknown-name", "ill-typed-value", "misspelt-build-option"])
def test_options_xla_refuses_are_refused_with_its_message(devices, options, message):
    messages = []
    for device in devices:
        with pytest.raises(jax.errors.JaxRuntimeError, match=message) as caught:
            _compile(device, options)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
