"""Train a 2-layer decoder-only transformer on a pjrtkit backend and on XLA's CPU backend.

What it shows: a small language-model training step, written in plain JAX, gives the same loss
on the backend under test as on XLA's own CPU backend in the same process, to a relative 1e-4
(float32) at every step. The step exercises, in StableHLO terms:

- ``gather`` (token-embedding lookup) and ``scatter`` with add (its gradient),
- ``iota`` / ``compare`` / ``select`` (the causal mask),
- batched ``dot_general`` (attention), softmax and log-softmax (``reduce`` max and add, ``exp``,
  ``log``), layernorm (``rsqrt``), GELU with the tanh approximation (``tanh``, ``power``-free
  polynomial), ``take_along_axis`` of the labels (another ``gather`` and, backward, ``scatter``),
- AdamW written by hand, after clipping the gradients by their global norm (``sqrt``, ``min``).

Model: vocabulary 97, sequence 32, d_model 64, 4 heads, MLP width 256, 2 pre-LN decoder blocks,
learned positional embedding, final layernorm and an untied output projection; batch 8.

Data: made with NumPy from the seed: every sequence is an arithmetic progression modulo 97,
x_t = (a + b t) mod 97 with a random start a and stride b, and the model learns to predict the
next token. No downloads.

Run (from the repository root):

    .venv/bin/python examples/transformer_train.py --steps 10                 # pjrtkit_cpu vs XLA
    .venv/bin/python examples/transformer_train.py --backend cpu --steps 10   # self-check

XLA's cpu platform is enabled beside the backend under test even if JAX_PLATFORMS names only
the backend. Exit status: 0 PASS, 1 FAIL, 2 backend could not be started.
"""
from __future__ import annotations

import math
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import _harness

VOCAB = 97
SEQ_LEN = 32
D_MODEL = 64
N_HEADS = 4
D_HEAD = D_MODEL // N_HEADS
D_MLP = 4 * D_MODEL
N_LAYERS = 2
BATCH = 8
LAYERNORM_EPS = 1e-5
MASKED_SCORE = -1e9  # finite, so a fully masked row could never produce inf - inf = nan

LEARNING_RATE = 3e-3
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-8
WEIGHT_DECAY = 0.01
MAX_GRAD_NORM = 1.0
TOLERANCE = 1e-4


def init_params(rng: np.random.Generator) -> dict:
    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def layernorm():
        return {"scale": np.ones((D_MODEL,), np.float32), "bias": np.zeros((D_MODEL,), np.float32)}

    # No biases on the query/key/value projections: the gradient of a key bias is zero in
    # exact arithmetic (softmax is shift-invariant), so in float32 it is pure rounding noise,
    # which Adam's normalisation would blow up to a full-size update that differs per backend.
    layers = [{
        "ln1": layernorm(),
        "w_qkv": normal((D_MODEL, 3 * D_MODEL), 1 / math.sqrt(D_MODEL)),
        "w_out": normal((D_MODEL, D_MODEL), 1 / math.sqrt(D_MODEL) / math.sqrt(2 * N_LAYERS)),
        "ln2": layernorm(),
        "w_up": normal((D_MODEL, D_MLP), 1 / math.sqrt(D_MODEL)),
        "b_up": np.zeros((D_MLP,), np.float32),
        "w_down": normal((D_MLP, D_MODEL), 1 / math.sqrt(D_MLP) / math.sqrt(2 * N_LAYERS)),
        "b_down": np.zeros((D_MODEL,), np.float32),
    } for _ in range(N_LAYERS)]
    return {
        "tok_emb": normal((VOCAB, D_MODEL), 0.02 * math.sqrt(D_MODEL)),
        "pos_emb": normal((SEQ_LEN, D_MODEL), 0.02 * math.sqrt(D_MODEL)),
        "layers": layers,
        "ln_final": layernorm(),
        "w_head": normal((D_MODEL, VOCAB), 1 / math.sqrt(D_MODEL)),
        "b_head": np.zeros((VOCAB,), np.float32),
    }


def make_batches(rng: np.random.Generator, steps: int) -> list[dict[str, np.ndarray]]:
    positions = np.arange(SEQ_LEN + 1)
    batches = []
    for _ in range(steps):
        start = rng.integers(0, VOCAB, size=(BATCH, 1))
        stride = rng.integers(1, VOCAB, size=(BATCH, 1))
        sequences = (start + stride * positions) % VOCAB
        batches.append({"tokens": sequences[:, :-1].astype(np.int32),
                        "labels": sequences[:, 1:].astype(np.int32)})
    return batches


def layernorm(x, p):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    variance = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(variance + LAYERNORM_EPS) * p["scale"] + p["bias"]


def gelu_tanh(x):
    return 0.5 * x * (1 + jnp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))


def softmax(x):
    shifted = x - lax.stop_gradient(jnp.max(x, axis=-1, keepdims=True))
    exp = jnp.exp(shifted)
    return exp / jnp.sum(exp, axis=-1, keepdims=True)


def log_softmax(x):
    shifted = x - lax.stop_gradient(jnp.max(x, axis=-1, keepdims=True))
    return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=-1, keepdims=True))


def causal_attention(x, layer):
    batch, seq, _ = x.shape
    q, k, v = jnp.split(x @ layer["w_qkv"], 3, axis=-1)

    def heads(t):  # (batch, seq, d_model) -> (batch, heads, seq, d_head)
        return t.reshape(batch, seq, N_HEADS, D_HEAD).transpose(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(D_HEAD)
    query_pos = lax.broadcasted_iota(jnp.int32, (seq, seq), 0)
    key_pos = lax.broadcasted_iota(jnp.int32, (seq, seq), 1)
    scores = jnp.where(key_pos <= query_pos, scores, MASKED_SCORE)
    attended = jnp.einsum("bhqk,bhkd->bhqd", softmax(scores), v)
    return attended.transpose(0, 2, 1, 3).reshape(batch, seq, D_MODEL) @ layer["w_out"]


def forward(params, tokens):
    x = params["tok_emb"][tokens] + params["pos_emb"][None, : tokens.shape[1]]
    for layer in params["layers"]:
        x = x + causal_attention(layernorm(x, layer["ln1"]), layer)
        hidden = gelu_tanh(layernorm(x, layer["ln2"]) @ layer["w_up"] + layer["b_up"])
        x = x + hidden @ layer["w_down"] + layer["b_down"]
    return layernorm(x, params["ln_final"]) @ params["w_head"] + params["b_head"]


def loss_fn(params, batch):
    log_probs = log_softmax(forward(params, batch["tokens"]))
    label_log_probs = jnp.take_along_axis(log_probs, batch["labels"][..., None], axis=-1)
    return -jnp.mean(label_log_probs)


def clip_by_global_norm(grads):
    norm = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grads)))
    scale = jnp.minimum(1.0, MAX_GRAD_NORM / (norm + 1e-6))
    return jax.tree.map(lambda g: g * scale, grads)


def adamw_update(params, grads, m, v, count):
    """AdamW (Loshchilov & Hutter): Adam plus decoupled weight decay on matrices only."""
    m = jax.tree.map(lambda m, g: ADAM_B1 * m + (1 - ADAM_B1) * g, m, grads)
    v = jax.tree.map(lambda v, g: ADAM_B2 * v + (1 - ADAM_B2) * g * g, v, grads)
    t = count.astype(jnp.float32)
    m_scale = 1 / (1 - ADAM_B1 ** t)
    v_scale = 1 / (1 - ADAM_B2 ** t)

    def update(p, m, v):
        decay = WEIGHT_DECAY * p if p.ndim >= 2 else 0.0  # no decay on biases and norm scales
        return p - LEARNING_RATE * ((m * m_scale) / (jnp.sqrt(v * v_scale) + ADAM_EPS) + decay)

    return jax.tree.map(update, params, m, v), m, v


def train_step(state, batch):
    loss, grads = jax.value_and_grad(loss_fn)(state["params"], batch)
    count = state["count"] + 1
    params, m, v = adamw_update(state["params"], clip_by_global_norm(grads),
                                state["m"], state["v"], count)
    return {"params": params, "m": m, "v": v, "count": count}, loss


def build(seed: int, steps: int) -> _harness.Experiment:
    rng = np.random.default_rng(seed)
    params = init_params(rng)
    zeros = jax.tree.map(np.zeros_like, params)
    state = {"params": params, "m": zeros, "v": zeros, "count": np.zeros((), np.int32)}
    return _harness.Experiment(name="transformer", state=state,
                               batches=make_batches(rng, steps),
                               train_step=train_step, tolerance=TOLERANCE)


if __name__ == "__main__":
    sys.exit(_harness.main(build, description=__doc__, default_steps=10))
