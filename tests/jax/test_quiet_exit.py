"""Interpreter exit prints nothing from pjrtkit: arrays that outlive pjrtkit's modules (held by a
module torn down after them, or by a reference cycle) are freed by jaxlib while Python
finalizes, when pjrtkit's Python can no longer run; the C entry points then release nothing
instead of entering Python (abi/_build.py, "finalizing"). Before, this printed "Exception
ignored from cffi callback ... drain_destroyed" or "PJRT_Buffer_Destroy raised AttributeError"."""
from __future__ import annotations

import pytest

EXPECTED_STDERR = ("Platform 'pjrtkit_cpu' is experimental and not all JAX functionality may "
                   "be correctly supported!")

SCENARIOS = {
    # numpy is imported before pjrtkit, so its globals are cleared after pjrtkit's.
    "arrays held by an earlier module": """
        np._held = ([f(jax.device_put(np.ones(4, np.float32), d)) for _ in range(5)],
                    f(jax.device_put(np.ones(1 << 20, np.float32), d)),
                    [f(jax.device_put(np.ones(4, np.float32), d)) for _ in range(5)])
    """,
    "arrays in a reference cycle": """
        class Node:
            pass
        node = Node()
        node.self = node
        node.small = [f(jax.device_put(np.ones(4, np.float32), d)) for _ in range(5)]
        node.big = f(jax.device_put(np.ones(1 << 20, np.float32), d))
        np._node = node
    """,
    "pending work and serialized bytes": """
        from jax.experimental.serialize_executable import serialize
        np._held = serialize(jax.jit(lambda a: a + 1).lower(np.ones(3, np.float32)).compile())
        np._pending = [f(jax.device_put(np.ones(1 << 18, np.float32), d)) for _ in range(20)]
    """,
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_exit_prints_nothing(run_python, scenario):
    body = "\n".join(line[8:] for line in SCENARIOS[scenario].strip("\n").splitlines())
    result = run_python("""
import numpy as np
import jax
jax.config.update("jax_platforms", "pjrtkit_cpu,cpu")
d = jax.devices("pjrtkit_cpu")[0]
f = jax.jit(lambda a: a * 2)
""" + body + "\nprint('done')\n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "done"
    assert [line for line in result.stderr.splitlines() if line != EXPECTED_STDERR] == [], \
        result.stderr[-3000:]
