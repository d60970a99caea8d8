"""Train a 784-512-512-10 MLP on a pjrtkit backend and on XLA's CPU backend, step by step.

What it shows: an unchanged JAX training step (matmuls, ReLU, log-softmax cross-entropy, its
gradient, SGD with momentum written by hand) runs on the backend under test and gives the same
loss as XLA's own CPU backend in the same process, to a relative 1e-5 (float32) at every step.

Data: batches of 128 synthetic "images" (784 features), made with NumPy from the seed: each of
the 10 classes has a random prototype, and an example is its class prototype plus noise, so the
loss really goes down. No downloads.

Run (from the repository root):

    .venv/bin/python examples/mlp_train.py --steps 20                 # pjrtkit_cpu vs XLA cpu
    .venv/bin/python examples/mlp_train.py --backend cpu --steps 20   # self-check of the example

XLA's cpu platform is enabled beside the backend under test even if JAX_PLATFORMS names only
the backend. Exit status: 0 PASS, 1 FAIL, 2 backend could not be started.
"""
from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

import _harness

LAYER_SIZES = (784, 512, 512, 10)
BATCH = 128
LEARNING_RATE = 0.01
MOMENTUM = 0.9
PROTOTYPE_SCALE = 0.2
TOLERANCE = 1e-5


def init_params(rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    """He-normal weights for the ReLU layers, LeCun-normal for the logits, zero biases."""
    params = []
    for i, (n_in, n_out) in enumerate(zip(LAYER_SIZES[:-1], LAYER_SIZES[1:])):
        gain = 1.0 if i == len(LAYER_SIZES) - 2 else 2.0
        params.append({
            "w": (rng.standard_normal((n_in, n_out)) * np.sqrt(gain / n_in)).astype(np.float32),
            "b": np.zeros((n_out,), np.float32)})
    return params


def make_batches(rng: np.random.Generator, steps: int) -> list[dict[str, np.ndarray]]:
    n_classes = LAYER_SIZES[-1]
    prototypes = rng.standard_normal((n_classes, LAYER_SIZES[0])).astype(np.float32)
    batches = []
    for _ in range(steps):
        labels = rng.integers(0, n_classes, size=BATCH)
        noise = rng.standard_normal((BATCH, LAYER_SIZES[0])).astype(np.float32)
        # Weak class signal in unit-variance noise: learnable, but not solved in a few steps
        # (a loss near 0 would make its relative difference meaningless).
        images = (PROTOTYPE_SCALE * prototypes[labels] + noise).astype(np.float32)
        batches.append({"x": images, "y": labels.astype(np.int32)})
    return batches


def forward(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, batch):
    logits = forward(params, batch["x"])
    log_probs = jax.nn.log_softmax(logits)
    one_hot = jax.nn.one_hot(batch["y"], LAYER_SIZES[-1], dtype=log_probs.dtype)
    return -jnp.mean(jnp.sum(one_hot * log_probs, axis=-1))


def train_step(state, batch):
    """SGD with (heavy-ball) momentum: v <- mu v + g; p <- p - lr v."""
    loss, grads = jax.value_and_grad(loss_fn)(state["params"], batch)
    velocity = jax.tree.map(lambda v, g: MOMENTUM * v + g, state["velocity"], grads)
    params = jax.tree.map(lambda p, v: p - LEARNING_RATE * v, state["params"], velocity)
    return {"params": params, "velocity": velocity}, loss


def build(seed: int, steps: int) -> _harness.Experiment:
    rng = np.random.default_rng(seed)
    params = init_params(rng)
    state = {"params": params, "velocity": jax.tree.map(np.zeros_like, params)}
    return _harness.Experiment(name="mlp", state=state, batches=make_batches(rng, steps),
                               train_step=train_step, tolerance=TOLERANCE)


if __name__ == "__main__":
    sys.exit(_harness.main(build, description=__doc__, default_steps=20))
