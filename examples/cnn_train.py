"""Train a small convnet on a pjrtkit backend and on XLA's CPU backend, step by step.

What it shows: convolutions and pooling, forward and backward, on the backend under test give
the same loss as XLA's own CPU backend in the same process, to a relative 1e-4 (float32) at
every step. The step exercises, in StableHLO terms:

- ``convolution`` (forward, and its transposes for the input and kernel gradients),
- ``reduce_window`` (max-pool with ``lax.max``, avg-pool with ``lax.add``),
- ``select_and_scatter`` (the gradient of the max-pool),
- ``pad`` / ``reduce_window`` again for the gradient of the avg-pool,
- log-softmax cross-entropy, and Adam written by hand (sqrt, divide, integer power).

Model: conv 3x3 (1->8) + ReLU + max-pool 2x2 -> conv 3x3 (8->16) + ReLU + avg-pool 2x2
-> dense (7*7*16 -> 10); NHWC images, batch 32.

Data: 28x28x1 synthetic images made with NumPy from the seed: each of the 10 classes has a
blocky random template (a 7x7 pattern upsampled 4x), an image is its template plus noise.
No downloads.

Run (from the repository root):

    .venv/bin/python examples/cnn_train.py --steps 10                 # pjrtkit_cpu vs XLA cpu
    .venv/bin/python examples/cnn_train.py --backend cpu --steps 10   # self-check of the example

XLA's cpu platform is enabled beside the backend under test even if JAX_PLATFORMS names only
the backend. Exit status: 0 PASS, 1 FAIL, 2 backend could not be started.
"""
from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import _harness

BATCH = 32
IMAGE_SIZE = 28
N_CLASSES = 10
CONV1_CHANNELS = 8
CONV2_CHANNELS = 16
TEMPLATE_SCALE = 0.5
LEARNING_RATE = 1e-3
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-8
TOLERANCE = 1e-4

CONV_DIMENSIONS = ("NHWC", "HWIO", "NHWC")
POOL_WINDOW = (1, 2, 2, 1)


def init_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def he_normal(shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    flat = (IMAGE_SIZE // 4) ** 2 * CONV2_CHANNELS
    return {
        "conv1_w": he_normal((3, 3, 1, CONV1_CHANNELS), 3 * 3 * 1),
        "conv1_b": np.zeros((CONV1_CHANNELS,), np.float32),
        "conv2_w": he_normal((3, 3, CONV1_CHANNELS, CONV2_CHANNELS), 3 * 3 * CONV1_CHANNELS),
        "conv2_b": np.zeros((CONV2_CHANNELS,), np.float32),
        "dense_w": (rng.standard_normal((flat, N_CLASSES)) / np.sqrt(flat)).astype(np.float32),
        "dense_b": np.zeros((N_CLASSES,), np.float32),
    }


def make_batches(rng: np.random.Generator, steps: int) -> list[dict[str, np.ndarray]]:
    coarse = rng.standard_normal((N_CLASSES, IMAGE_SIZE // 4, IMAGE_SIZE // 4))
    templates = np.kron(coarse, np.ones((4, 4))).astype(np.float32)  # (10, 28, 28)
    batches = []
    for _ in range(steps):
        labels = rng.integers(0, N_CLASSES, size=BATCH)
        noise = rng.standard_normal((BATCH, IMAGE_SIZE, IMAGE_SIZE))
        images = TEMPLATE_SCALE * templates[labels] + noise
        batches.append({"x": images[..., None].astype(np.float32),
                        "y": labels.astype(np.int32)})
    return batches


def conv(x, w, b):
    y = lax.conv_general_dilated(x, w, window_strides=(1, 1), padding="SAME",
                                 dimension_numbers=CONV_DIMENSIONS)
    return y + b


def max_pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, POOL_WINDOW, POOL_WINDOW, "VALID")


def avg_pool(x):
    window_sum = lax.reduce_window(x, 0.0, lax.add, POOL_WINDOW, POOL_WINDOW, "VALID")
    return window_sum / (POOL_WINDOW[1] * POOL_WINDOW[2])


def forward(params, images):
    x = max_pool(jax.nn.relu(conv(images, params["conv1_w"], params["conv1_b"])))
    x = avg_pool(jax.nn.relu(conv(x, params["conv2_w"], params["conv2_b"])))
    x = x.reshape(x.shape[0], -1)
    return x @ params["dense_w"] + params["dense_b"]


def loss_fn(params, batch):
    log_probs = jax.nn.log_softmax(forward(params, batch["x"]))
    one_hot = jax.nn.one_hot(batch["y"], N_CLASSES, dtype=log_probs.dtype)
    return -jnp.mean(jnp.sum(one_hot * log_probs, axis=-1))


def adam_update(params, grads, m, v, count):
    """One Adam step (Kingma & Ba), bias-corrected; ``count`` is the 1-based step number."""
    m = jax.tree.map(lambda m, g: ADAM_B1 * m + (1 - ADAM_B1) * g, m, grads)
    v = jax.tree.map(lambda v, g: ADAM_B2 * v + (1 - ADAM_B2) * g * g, v, grads)
    t = count.astype(jnp.float32)
    m_scale = 1 / (1 - ADAM_B1 ** t)
    v_scale = 1 / (1 - ADAM_B2 ** t)
    params = jax.tree.map(
        lambda p, m, v: p - LEARNING_RATE * (m * m_scale) / (jnp.sqrt(v * v_scale) + ADAM_EPS),
        params, m, v)
    return params, m, v


def train_step(state, batch):
    loss, grads = jax.value_and_grad(loss_fn)(state["params"], batch)
    count = state["count"] + 1
    params, m, v = adam_update(state["params"], grads, state["m"], state["v"], count)
    return {"params": params, "m": m, "v": v, "count": count}, loss


def build(seed: int, steps: int) -> _harness.Experiment:
    rng = np.random.default_rng(seed)
    params = init_params(rng)
    zeros = jax.tree.map(np.zeros_like, params)
    state = {"params": params, "m": zeros, "v": zeros, "count": np.zeros((), np.int32)}
    return _harness.Experiment(name="cnn", state=state, batches=make_batches(rng, steps),
                               train_step=train_step, tolerance=TOLERANCE)


if __name__ == "__main__":
    sys.exit(_harness.main(build, description=__doc__, default_steps=10))
