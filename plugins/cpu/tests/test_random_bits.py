"""rng_bit_generator bit-for-bit against XLA's CPU backend, and jax.random end to end."""
import jax
import numpy as np
import pytest
from jax import lax

from pjrtkit.errors import Unimplemented
from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo.loader import load_program
from pjrtkit.testing.tolerances import assert_close

ALGORITHMS = {"THREE_FRY": lax.RandomAlgorithm.RNG_THREE_FRY,
              "PHILOX": lax.RandomAlgorithm.RNG_PHILOX,
              "DEFAULT": lax.RandomAlgorithm.RNG_DEFAULT}
BIT_DTYPES = [np.uint8, np.uint16, np.uint32, np.uint64]
# Scalars, zero-size, odd and even sizes: they pick different split dimensions for THREE_FRY
# and leave partial Philox blocks.
SHAPES = [(), (0,), (1,), (3,), (4,), (5, 7), (3, 5, 2), (2, 3, 0), (7, 1, 3), (1, 9), (1001,)]


def random_state(rng):
    return rng.integers(0, 2 ** 64, (2,), dtype=np.uint64, endpoint=False)


# DEFAULT is PHILOX on XLA's CPU backend; checking it on two widths is enough to pin that down.
CASES = [(a, d) for a in ("THREE_FRY", "PHILOX") for d in BIT_DTYPES] + [
    ("DEFAULT", np.uint32), ("DEFAULT", np.uint64)]


@pytest.mark.parametrize("algorithm,dtype", CASES,
                         ids=[f"{a}-{np.dtype(d).name}" for a, d in CASES])
def test_rng_bit_generator(check, rng, algorithm, dtype):
    def f(state):
        outputs = []
        for shape in SHAPES:  # chain the state through every shape: also checks each new state
            state, bits = lax.rng_bit_generator(state, shape, dtype=dtype,
                                                algorithm=ALGORITHMS[algorithm])
            outputs += [state, bits]
        return outputs

    check(f, random_state(rng))
    # Counters about to wrap: carries into the key word / the counter's high word.
    check(f, np.array([rng.integers(0, 2 ** 63), 2 ** 64 - 3], dtype=np.uint64))
    check(f, np.array([2 ** 64 - 1, 2 ** 64 - 1], dtype=np.uint64))


PHILOX_WIDE_STATE = """
func.func public @main(%s: tensor<3xui64>) -> (tensor<3xui64>, tensor<5x3xui32>, tensor<3xui64>, tensor<7xui64>) {
  %s1, %a = stablehlo.rng_bit_generator %s, algorithm = PHILOX : (tensor<3xui64>) -> (tensor<3xui64>, tensor<5x3xui32>)
  %s2, %b = stablehlo.rng_bit_generator %s1, algorithm = DEFAULT : (tensor<3xui64>) -> (tensor<3xui64>, tensor<7xui64>)
  return %s1, %a, %s2, %b : tensor<3xui64>, tensor<5x3xui32>, tensor<3xui64>, tensor<7xui64>
}
"""


@pytest.mark.parametrize("state", [[1, 2, 3], [7, 2 ** 64 - 4, 9], [0, 2 ** 64 - 1, 2 ** 64 - 1]])
def test_philox_with_128_bit_counter(registry, state):
    # JAX only emits two-word states; a three-word state holds a full 128-bit counter.
    from jax._src import xla_bridge
    from jax._src.lib import xla_client

    state = np.array(state, dtype=np.uint64)
    backend = xla_bridge.get_backend("cpu")
    device = backend.devices()[0]
    executable = backend.compile_and_load(PHILOX_WIDE_STATE, xla_client.DeviceList((device,)),
                                          xla_client.CompileOptions())
    ref = executable.execute([jax.device_put(state, device)])
    ours = build_plan(load_program(PHILOX_WIDE_STATE), registry)(state)
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert_close(a, np.asarray(b), what=f"output {i}")


def test_three_fry_with_wide_state_is_unimplemented(registry):
    text = PHILOX_WIDE_STATE.replace("algorithm = PHILOX", "algorithm = THREE_FRY")
    with pytest.raises(Unimplemented, match="THREE_FRY"):
        build_plan(load_program(text), registry)


# -- jax.random end to end: threefry keys use plain integer ops, rbg keys use the op ----------
IMPLS = ["threefry2x32", "rbg", "unsafe_rbg"]


@pytest.mark.parametrize("impl", IMPLS)
def test_jax_random_programs(check, impl):
    def f(seed):
        key = jax.random.key(seed, impl=impl)
        k1, k2, k3 = jax.random.split(key, 3)
        return (jax.random.uniform(k1, (1000,), dtype=np.float32),
                jax.random.uniform(k2, (7, 3), dtype=np.float64, minval=-2, maxval=5),
                jax.random.randint(k3, (50,), -100, 1000, dtype=np.int32),
                jax.random.key_data(jax.random.split(k1, 4)),
                jax.random.bits(k2, (5,), dtype=np.uint64),
                jax.random.bernoulli(k3, 0.3, (9,)))

    for seed in (0, 42, 2 ** 31 - 1):
        check(f, np.uint32(seed))


@pytest.mark.parametrize("impl", IMPLS)
def test_jax_random_normal(check, impl):
    def f(seed):
        k1, k2 = jax.random.split(jax.random.key(seed, impl=impl))
        return (jax.random.normal(k1, (1000,), dtype=np.float32),
                jax.random.normal(k2, (5, 3), dtype=np.float64),
                jax.random.normal(k2, (7,), dtype=np.float16))

    for seed in (0, 42):  # normal() runs through the erf_inv polynomial (CHLO, decomposed)
        check(f, np.uint32(seed))


def test_jax_random_in_a_loop(check):
    def f(seed):
        def body(i, carry):
            key, total = carry
            key, sub = jax.random.split(key)
            return key, total + jax.random.uniform(sub, (4,), dtype=np.float32)
        return lax.fori_loop(0, 5, body, (jax.random.key(seed), np.zeros(4, np.float32)))[1]

    check(f, np.uint32(3))
