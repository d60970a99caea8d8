"""jax.experimental.serialize_executable on pjrtkit_cpu: an executable serialized in one process
loads and runs in another (the bytes pjrtkit writes inside JAX's own wrapper are the format of
runtime/serialized_executable.py), and a damaged pjrtkit blob is INVALID_ARGUMENT there."""
from __future__ import annotations

SERIALIZE = """
import pickle
import jax, jax.numpy as jnp
from jax.experimental.serialize_executable import serialize
jax.config.update("jax_platforms", "pjrtkit_cpu,cpu")
d = jax.devices("pjrtkit_cpu")[0]
x = jax.device_put(jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3), d)
compiled = jax.jit(lambda a: jnp.tanh(a) @ a.T + 1).lower(x).compile()
payload, in_tree, out_tree = serialize(compiled)
with open(PATH, "wb") as f:
    pickle.dump((payload, in_tree, out_tree), f)
print("written")
"""

LOAD = """
import pickle
import numpy as np
import jax, jax.numpy as jnp
from jax.experimental.serialize_executable import deserialize_and_load
jax.config.update("jax_platforms", "pjrtkit_cpu,cpu")
d, cpu = jax.devices("pjrtkit_cpu")[0], jax.devices("cpu")[0]
with open(PATH, "rb") as f:
    payload, in_tree, out_tree = pickle.load(f)
loaded = deserialize_and_load(payload, in_tree, out_tree, backend="pjrtkit_cpu")
a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
got = np.asarray(loaded(jax.device_put(a, d)))
want = np.asarray(jax.jit(lambda a: jnp.tanh(a) @ a.T + 1)(jax.device_put(a, cpu)))
np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
print("ran", got.shape)
"""

def test_an_executable_serialized_in_one_process_runs_in_another(run_python, tmp_path):
    path = tmp_path / "executable.pickle"
    first = run_python(f"PATH = {str(path)!r}\n" + SERIALIZE)
    assert first.returncode == 0 and first.stdout.strip() == "written", first.stderr[-3000:]
    second = run_python(f"PATH = {str(path)!r}\n" + LOAD)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.strip() == "ran (2, 2)"


def test_a_damaged_blob_is_invalid_argument_in_the_loading_process(run_python, tmp_path):
    path = tmp_path / "executable.pickle"
    first = run_python(f"PATH = {str(path)!r}\n" + SERIALIZE)
    assert first.returncode == 0, first.stderr[-3000:]
    # Flip one byte in the middle of pjrtkit's blob inside JAX's pickle, then load it.
    second = run_python(f"PATH = {str(path)!r}\n" + """
import pickle
import jax
from jax.experimental.serialize_executable import deserialize_and_load
from pjrtkit.runtime import serialized_executable as fmt
jax.config.update("jax_platforms", "pjrtkit_cpu,cpu")
with open(PATH, "rb") as f:
    payload, in_tree, out_tree = pickle.load(f)
start = payload.index(fmt.MAGIC)
blob_len = 52 + int.from_bytes(payload[start + 12:start + 20], "little")
damaged = bytearray(payload)
damaged[start + blob_len // 2] ^= 0x01
try:
    deserialize_and_load(bytes(damaged), in_tree, out_tree, backend="pjrtkit_cpu")
    print("loaded")
except Exception as exc:
    print(str(exc).splitlines()[0])
print(float(jax.numpy.ones(3).sum()))
""")
    assert second.returncode == 0, second.stderr[-3000:]
    error, alive = second.stdout.strip().splitlines()
    assert error.startswith("INVALID_ARGUMENT") and "checksum" in error, error
    assert alive == "3.0"
