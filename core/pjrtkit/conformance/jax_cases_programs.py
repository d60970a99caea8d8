"""Layer-3 cases as users write them: random numbers (eager keys, typed keys, every PRNG
implementation, the samplers people call), host callbacks (``jax.debug.print``,
``jax.debug.callback``, ``jax.pure_callback``, ``jax.experimental.io_callback``) and whole
training steps written the way optax and flax code is (pure ``init``/``update`` gradient
transformations over parameter pytrees, mutable batch statistics, dropout keys), in plain JAX
because neither library is a dependency of the project.

Callback cases print from the host function, and what the program prints must agree with XLA's
CPU backend as well as its outputs (``Case.prints``).
"""
from __future__ import annotations

import numpy as np

from pjrtkit.conformance.jax_cases import add

F32 = np.dtype(np.float32)
# A training step chains a few matmuls, a softmax and an optimizer update: float32 results
# differ from XLA's by rounding in summation order through every layer.
TRAINING_LOOSEN = 50.0


def _no_args(rng):
    return ()


def _seed(value: int):
    return lambda rng: (np.int32(value),)


def _random() -> None:
    import jax
    import jax.numpy as jnp

    def eager(name, fn, tag, **kw):
        add("random", name, fn, _no_args, tag, eager=True, **kw)

    # Eager keys: the key is made on the device by op-by-op dispatch, then used.
    eager("eager_prngkey_normal", lambda: jax.random.normal(jax.random.PRNGKey(0), (3,)),
          "float32-3")
    eager("eager_typed_key_uniform", lambda: jax.random.uniform(jax.random.key(1), (4,)),
          "float32-4")
    eager("eager_permutation", lambda: jax.random.permutation(jax.random.key(4),
                                                              jnp.arange(10)), "int32-10")

    # Typed keys made inside the program from a seed.
    def typed(name, sampler, tag, impl=None, seed=11):
        def fn(seed):
            key = jax.random.key(seed) if impl is None else jax.random.key(seed, impl=impl)
            return sampler(key)

        add("random", name, fn, _seed(seed), tag)

    typed("typed_key_normal", lambda k: jax.random.normal(k, (5,)), "float32-5")
    typed("typed_key_uniform_range",
          lambda k: jax.random.uniform(k, (2, 3), minval=-2.0, maxval=5.0), "float32-2x3")
    typed("typed_key_categorical", lambda k: jax.random.categorical(
        k, jnp.linspace(-1.0, 2.0, 15).reshape(3, 5), axis=-1, shape=(6, 3)), "int32-6x3")
    typed("typed_key_permutation_array",
          lambda k: jax.random.permutation(k, jnp.arange(12.0).reshape(4, 3)), "float32-4x3")
    typed("typed_key_bernoulli", lambda k: jax.random.bernoulli(k, 0.3, (16,)), "bool-16")
    typed("typed_key_choice", lambda k: jax.random.choice(k, 20, (5,), replace=False),
          "int32-5")
    typed("typed_key_truncated_normal",
          lambda k: jax.random.truncated_normal(k, -1.0, 2.0, (6,)), "float32-6")
    typed("typed_key_multivariate_normal", lambda k: jax.random.multivariate_normal(
        k, jnp.zeros(3), jnp.eye(3) + 0.5, (4,)), "float32-4x3")
    typed("typed_key_split_and_key_data",
          lambda k: jax.random.key_data(jax.random.split(k, 4)), "uint32-4x2")
    # The other PRNG implementations (jax_default_prng_impl): rbg lowers to
    # stablehlo.rng_bit_generator.
    for impl in ("rbg", "unsafe_rbg"):
        typed(f"impl_{impl}_normal", lambda k: jax.random.normal(k, (4,)), "float32-4",
              impl=impl)


# -- host callbacks ---------------------------------------------------------------------------------

def _host_sin(x):
    return np.sin(x).astype(x.dtype)


def _host_log_and_triple(x):
    print(f"io_callback got {np.asarray(x).tolist()}")
    return (np.asarray(x) * 3).astype(x.dtype)


def _host_report(x):
    print(f"debug.callback sum={int(np.asarray(x).sum())}")


def _callbacks() -> None:
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import io_callback

    ints = lambda rng: (rng.integers(-9, 10, (2, 3)).astype(np.int32),)  # noqa: E731

    def shaped(x):
        return jax.ShapeDtypeStruct(x.shape, x.dtype)

    def cases(name, fn, make, tag, **kw):
        add("callbacks", name, fn, make, tag, capability="JAX host callbacks", **kw)

    cases("pure_callback", lambda x: jax.pure_callback(_host_sin, shaped(x), x) * 2 + 1,
          lambda rng: (rng.normal(size=(3, 4)).astype(F32),), "float32-3x4")
    cases("pure_callback_vmap", jax.vmap(
        lambda v: jax.pure_callback(_host_sin, shaped(v), v, vmap_method="sequential")),
        lambda rng: (rng.normal(size=(2, 5)).astype(F32),), "float32-2x5")
    cases("io_callback_ordered",
          lambda x: io_callback(_host_log_and_triple, shaped(x), x + 1, ordered=True) - 1,
          ints, "int32-2x3", prints=True)
    cases("io_callback_unordered",
          lambda x: io_callback(_host_log_and_triple, shaped(x), x * 2), ints, "int32-2x3",
          prints=True)
    cases("io_callback_in_loop", lambda x: lax.fori_loop(
        0, 3, lambda i, c: io_callback(_host_log_and_triple, shaped(c), c + i, ordered=True),
        x), ints, "int32-2x3", prints=True)

    def debug_print(x):
        jax.debug.print("x={x} total={t}", x=x, t=jnp.sum(x))
        return x + 1

    cases("debug_print", debug_print, ints, "int32-2x3", prints=True)

    def debug_callback(x):
        jax.debug.callback(_host_report, x * 2)
        return x - 1

    cases("debug_callback", debug_callback, ints, "int32-2x3", prints=True)


# -- training steps, optax/flax style in plain JAX ---------------------------------------------------

def _tree_map(fn, *trees):
    import jax

    return jax.tree_util.tree_map(fn, *trees)


def _adam(learning_rate, b1=0.9, b2=0.999, eps=1e-3, weight_decay=0.0):
    """An optax-style GradientTransformation: (init(params), update(grads, state, params)).
    ``eps`` is larger than optax's default so the update is smooth where a gradient is near
    zero (its sign would otherwise decide a whole step)."""
    import jax.numpy as jnp

    def init(params):
        zeros = _tree_map(jnp.zeros_like, params)
        return {"count": jnp.zeros((), jnp.int32), "mu": zeros, "nu": zeros}

    def update(grads, state, params):
        count = state["count"] + 1
        mu = _tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
        nu = _tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)
        c1 = 1 - b1 ** count.astype(jnp.float32)
        c2 = 1 - b2 ** count.astype(jnp.float32)
        updates = _tree_map(
            lambda m, v, p: -learning_rate * ((m / c1) / (jnp.sqrt(v / c2) + eps)
                                              + weight_decay * p), mu, nu, params)
        return updates, {"count": count, "mu": mu, "nu": nu}

    return init, update


def _sgd_momentum(learning_rate, momentum=0.9):
    import jax.numpy as jnp

    def init(params):
        return _tree_map(jnp.zeros_like, params)

    def update(grads, trace, params):
        trace = _tree_map(lambda t, g: momentum * t + g, trace, grads)
        return _tree_map(lambda t: -learning_rate * t, trace), trace

    return init, update


def _clip_by_global_norm(grads, max_norm):
    import jax
    import jax.numpy as jnp

    norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads)))
    scale = jnp.minimum(1.0, max_norm / (norm + 1e-6))
    return _tree_map(lambda g: g * scale, grads)


def _apply_updates(params, updates):
    return _tree_map(lambda p, u: p + u, params, updates)


def _cross_entropy(logits, labels):
    import jax
    import jax.numpy as jnp

    one_hot = jax.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)
    return -jnp.mean(jnp.sum(one_hot * jax.nn.log_softmax(logits), axis=-1))


def _dense(rng, n_in, n_out):
    return {"w": (rng.normal(size=(n_in, n_out)) / np.sqrt(n_in)).astype(F32),
            "b": np.zeros(n_out, F32)}


def _layer_norm(x, scale, bias):
    import jax.numpy as jnp

    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * scale + bias


def _mlp_adam_step(params, opt_state, x, labels):
    import jax

    init, update = _adam(1e-2)

    def loss_fn(p):
        h = jax.nn.relu(x @ p["l1"]["w"] + p["l1"]["b"])
        return _cross_entropy(h @ p["l2"]["w"] + p["l2"]["b"], labels)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = update(grads, opt_state, params)
    return _apply_updates(params, updates), opt_state, loss


def _adam_state(params):
    """What ``_adam(...)[0](params)`` returns, made in NumPy: inputs are host arrays, made
    without running anything on a device."""
    import jax

    zeros = jax.tree_util.tree_map(np.zeros_like, params)
    return {"count": np.zeros((), np.int32), "mu": zeros, "nu": zeros}


def _mlp_inputs(rng):
    params = {"l1": _dense(rng, 8, 16), "l2": _dense(rng, 16, 4)}
    return (params, _adam_state(params), rng.normal(size=(12, 8)).astype(F32),
            rng.integers(0, 4, 12).astype(np.int32))


def _mlp_fori_loop(params, opt_state, x, labels):
    from jax import lax

    def body(i, carry):
        p, s, _ = carry
        return _mlp_adam_step(p, s, x, labels)

    return lax.fori_loop(0, 4, body, (params, opt_state, np.float32(0)))


def _cnn_step(params, trace, images, labels):
    import jax
    import jax.numpy as jnp
    from jax import lax

    init, update = _sgd_momentum(0.05)

    def loss_fn(p):
        y = lax.conv_general_dilated(images, p["conv"], (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = jax.nn.relu(y)
        y = lax.reduce_window(y, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4
        logits = y.reshape(y.shape[0], -1) @ p["out"]["w"] + p["out"]["b"]
        return _cross_entropy(logits, labels) + 1e-4 * jnp.sum(p["conv"] ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, trace = update(grads, trace, params)
    return _apply_updates(params, updates), trace, loss


def _cnn_inputs(rng):
    params = {"conv": (rng.normal(size=(3, 3, 2, 4)) / 4).astype(F32),
              "out": _dense(rng, 3 * 3 * 4, 5)}
    trace = {"conv": np.zeros((3, 3, 2, 4), F32),
             "out": {"w": np.zeros((36, 5), F32), "b": np.zeros(5, F32)}}
    return (params, trace, rng.normal(size=(4, 6, 6, 2)).astype(F32),
            rng.integers(0, 5, 4).astype(np.int32))


def _transformer_step(params, opt_state, tokens, targets):
    import jax
    import jax.numpy as jnp

    init, update = _adam(3e-3, weight_decay=1e-2)  # AdamW

    def loss_fn(p):
        x = p["embed"][tokens]
        h = _layer_norm(x, p["ln1_scale"], p["ln1_bias"])
        q, k, v = (h @ p["wq"], h @ p["wk"], h @ p["wv"])
        t = tokens.shape[-1]
        scores = jnp.einsum("btd,bsd->bts", q, k) / float(np.sqrt(q.shape[-1]))
        scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -1e9)
        x = x + jnp.einsum("bts,bsd->btd", jax.nn.softmax(scores, axis=-1), v) @ p["wo"]
        h = _layer_norm(x, p["ln2_scale"], p["ln2_bias"])
        x = x + jax.nn.gelu(h @ p["mlp_in"]) @ p["mlp_out"]
        return _cross_entropy(x @ p["embed"].T, targets)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = _clip_by_global_norm(grads, 1.0)
    updates, opt_state = update(grads, opt_state, params)
    return _apply_updates(params, updates), opt_state, loss


def _transformer_inputs(rng):
    d, vocab = 8, 11

    def w(*shape):
        return (rng.normal(size=shape) / np.sqrt(shape[0])).astype(F32)

    params = {"embed": w(vocab, d), "wq": w(d, d), "wk": w(d, d), "wv": w(d, d),
              "wo": w(d, d), "mlp_in": w(d, 16), "mlp_out": w(16, d),
              "ln1_scale": np.ones(d, F32), "ln1_bias": np.zeros(d, F32),
              "ln2_scale": np.ones(d, F32), "ln2_bias": np.zeros(d, F32)}
    opt_state = _adam_state(params)
    tokens = rng.integers(0, vocab, (2, 6)).astype(np.int32)
    return params, opt_state, tokens, np.roll(tokens, -1, axis=1)


def _rnn_step(params, xs, ys):
    import jax
    import jax.numpy as jnp
    from jax import lax

    def loss_fn(p):
        def cell(h, x):
            z = jax.nn.sigmoid(x @ p["wz"] + h @ p["uz"])
            candidate = jnp.tanh(x @ p["wh"] + (h * z) @ p["uh"])
            h = (1 - z) * h + z * candidate
            return h, h @ p["out"]

        _, predictions = lax.scan(cell, jnp.zeros((xs.shape[1], p["uz"].shape[0]), xs.dtype), xs)
        return jnp.mean((predictions - ys) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = _clip_by_global_norm(grads, 0.5)
    return _apply_updates(params, _tree_map(lambda g: -0.1 * g, grads)), loss


def _rnn_inputs(rng):
    def w(*shape):
        return (rng.normal(size=shape) / np.sqrt(shape[0])).astype(F32)

    params = {"wz": w(3, 5), "uz": w(5, 5), "wh": w(3, 5), "uh": w(5, 5), "out": w(5, 2)}
    return params, rng.normal(size=(7, 4, 3)).astype(F32), rng.normal(size=(7, 4, 2)).astype(F32)


def _batchnorm_dropout_step(params, batch_stats, x, labels, seed, step):
    """flax-style: BatchNorm keeps running statistics in a mutable collection that the step
    returns; dropout draws from a typed key folded with the step number."""
    import jax
    import jax.numpy as jnp

    key = jax.random.fold_in(jax.random.key(seed), step)

    def loss_fn(p):
        h = x @ p["l1"]["w"] + p["l1"]["b"]
        mean, var = jnp.mean(h, axis=0), jnp.var(h, axis=0)
        h = (h - mean) / jnp.sqrt(var + 1e-5) * p["bn_scale"] + p["bn_bias"]
        keep = jax.random.bernoulli(key, 0.8, h.shape)
        h = jnp.where(keep, jax.nn.relu(h) / 0.8, 0.0)
        logits = h @ p["l2"]["w"] + p["l2"]["b"]
        return _cross_entropy(logits, labels), (mean, var)

    (loss, (mean, var)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    new_stats = {"mean": 0.9 * batch_stats["mean"] + 0.1 * mean,
                 "var": 0.9 * batch_stats["var"] + 0.1 * var}
    return _apply_updates(params, _tree_map(lambda g: -0.05 * g, grads)), new_stats, loss


def _batchnorm_inputs(rng):
    params = {"l1": _dense(rng, 6, 10), "l2": _dense(rng, 10, 3),
              "bn_scale": np.ones(10, F32), "bn_bias": np.zeros(10, F32)}
    stats = {"mean": np.zeros(10, F32), "var": np.ones(10, F32)}
    return (params, stats, rng.normal(size=(16, 6)).astype(F32),
            rng.integers(0, 3, 16).astype(np.int32), np.int32(5), np.int32(3))


def _mixed_precision_step(params, x, y):
    """bfloat16 compute with float32 master weights and a static loss scale."""
    import jax
    import jax.numpy as jnp

    def loss_fn(p):
        half = _tree_map(lambda a: a.astype(jnp.bfloat16), p)
        h = jnp.tanh(x.astype(jnp.bfloat16) @ half["w1"])
        out = (h @ half["w2"]).astype(jnp.float32)
        return jnp.mean((out - y) ** 2) * 128.0

    scaled_loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = _tree_map(lambda g: g / 128.0, grads)
    return _apply_updates(params, _tree_map(lambda g: -0.1 * g, grads)), scaled_loss / 128.0


def _mixed_precision_inputs(rng):
    params = {"w1": (rng.normal(size=(6, 8)) / 3).astype(F32),
              "w2": (rng.normal(size=(8, 2)) / 3).astype(F32)}
    return params, rng.normal(size=(10, 6)).astype(F32), rng.normal(size=(10, 2)).astype(F32)


def _training() -> None:
    programs = [
        ("mlp_adam", _mlp_adam_step, _mlp_inputs, TRAINING_LOOSEN),
        ("mlp_adam_fori_loop", _mlp_fori_loop, _mlp_inputs, TRAINING_LOOSEN),
        ("cnn_sgd_momentum", _cnn_step, _cnn_inputs, TRAINING_LOOSEN),
        ("transformer_adamw_clip", _transformer_step, _transformer_inputs, TRAINING_LOOSEN),
        ("gru_scan_clip", _rnn_step, _rnn_inputs, TRAINING_LOOSEN),
        ("batchnorm_dropout", _batchnorm_dropout_step, _batchnorm_inputs, TRAINING_LOOSEN),
        # bfloat16 rounds to 8 bits: one rounding that falls the other way moves a weight by
        # a bfloat16 ulp times the learning rate, far beyond float32's tolerance.
        ("mixed_precision_bf16", _mixed_precision_step, _mixed_precision_inputs, 1000.0),
    ]
    for name, step, make, loosen in programs:
        add("program", name, step, make, "float32-train_step", loosen=loosen,
            capability="JAX training programs",
            description=f"one jitted training step ({name}, optax/flax style in plain JAX) "
                        f"gives XLA's parameters, optimizer state and loss")


BUILDERS = (_random, _callbacks, _training)
