"""Real workloads: programs written as users write them, with the libraries users use (flax,
optax, numpyro: the ``bench`` extra, ``pip install 'pjrtkit[bench]'``), each reported on its own
line outside the ten-workload geomean, with its time to steady state (first call and first ten
calls, compile included, both backends) beside the steady-state ratio.

``make(size)`` returns ``(fn, args)`` like ``workloads``; a workload of kind ``"call"`` is a
plain callable the runner calls as it is (un-jitted: an eager loop, numpyro's own ``MCMC.run``)
with its backend's device as JAX's default device.
"""
from __future__ import annotations

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from benchmarks.workloads import Workload


def _flax():
    try:
        import flax.linen as nn
        import optax
    except ImportError as exc:
        raise RuntimeError("this workload needs flax and optax: pip install 'pjrtkit[bench]' "
                           "(make install does)") from exc
    return nn, optax


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _train_step(model, tx, loss_of):
    """A jittable ``step(params, opt_state, batch) -> (params, opt_state, loss)``."""
    import optax

    def step(params, opt_state, batch):
        loss, grads = jax.value_and_grad(lambda p: loss_of(model, p, batch))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return step


ADAM_LR = 1e-3


def adam_step_close(actual, expected, loosen: float) -> None:
    """A training step with Adam: the loss within float32 tolerance (``loosen`` times), every
    parameter and moment within 2.5 learning rates of XLA's. Adam divides each gradient by its
    own magnitude, so a parameter whose gradient is zero but for rounding (an attention key's
    bias: softmax ignores a shift) moves by +-lr on either backend, on the rounding's sign."""
    from pjrtkit.testing.tolerances import assert_close

    *state, loss = jax.tree_util.tree_leaves(actual)
    *state_xla, loss_xla = jax.tree_util.tree_leaves(expected)
    assert_close(np.asarray(loss), np.asarray(loss_xla), what="loss", loosen=loosen)
    for i, (a, e) in enumerate(zip(state, state_xla)):
        a, e = np.asarray(a, np.float64), np.asarray(e, np.float64)
        worst = float(np.max(np.abs(a - e))) if a.size else 0.0
        if a.shape != e.shape or worst > 2.5 * ADAM_LR:
            raise AssertionError(f"state {i} {a.shape}: {worst} from XLA's (at most "
                                 f"{2.5 * ADAM_LR})")


def _xent(logits, labels):
    import optax

    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


# ---- flax CNN: 2 conv 32/64 3x3, dense 128, batch 64, 28x28, adam ---------------------------

def make_flax_cnn(size: str):
    nn, optax = _flax()
    batch, hw = (64, 28) if size == "full" else (2, 8)

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(32, (3, 3))(x))
            x = nn.max_pool(x, (2, 2), (2, 2))
            x = nn.relu(nn.Conv(64, (3, 3))(x))
            x = nn.max_pool(x, (2, 2), (2, 2))
            x = nn.relu(nn.Dense(128)(x.reshape(x.shape[0], -1)))
            return nn.Dense(10)(x)

    rng = _rng(10)
    x = rng.standard_normal((batch, hw, hw, 1)).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int32)
    model = CNN()
    params = model.init(jax.random.key(0), x)
    tx = optax.adam(ADAM_LR)
    step = _train_step(model, tx, lambda m, p, b: _xent(m.apply(p, b[0]), b[1]))
    return step, (params, tx.init(params), (x, y))


# ---- flax transformer LM: d 256, 4 layers, 4 heads, seq 128, batch 8, adamw -----------------

def make_flax_lm(size: str):
    nn, optax = _flax()
    d, layers, heads, seq, batch, vocab = ((256, 4, 4, 128, 8, 1024) if size == "full"
                                           else (16, 1, 2, 8, 1, 32))

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, mask):
            h = nn.LayerNorm()(x)
            x = x + nn.SelfAttention(num_heads=heads, deterministic=True)(h, mask=mask)
            h = nn.LayerNorm()(x)
            return x + nn.Dense(d)(nn.gelu(nn.Dense(4 * d)(h)))

    class LM(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            x = nn.Embed(vocab, d)(tokens) + self.param(
                "pos", nn.initializers.normal(0.02), (seq, d))
            mask = nn.make_causal_mask(tokens)
            for _ in range(layers):
                x = Block()(x, mask)
            return nn.Dense(vocab)(nn.LayerNorm()(x))

    rng = _rng(11)
    tokens = rng.integers(0, vocab, (batch, seq + 1)).astype(np.int32)
    model = LM()
    params = model.init(jax.random.key(1), tokens[:, :-1])
    tx = optax.adamw(ADAM_LR)
    step = _train_step(model, tx,
                       lambda m, p, b: _xent(m.apply(p, b[:, :-1]), b[:, 1:]))
    return step, (params, tx.init(params), tokens)


# ---- scan RNN: 1000 steps, batch 32, hidden 256 ---------------------------------------------

def make_scan_rnn_large(size: str):
    steps, batch, hidden = (1000, 32, 256) if size == "full" else (10, 2, 8)
    rng = _rng(12)
    xs = rng.standard_normal((steps, batch, hidden)).astype(np.float32)
    w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    u = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    b = np.zeros(hidden, np.float32)

    def rnn(h0, xs, w, u, b):
        def step(h, x):
            h = jnp.tanh(h @ w + x @ u + b)
            return h, h.mean()
        return lax.scan(step, h0, xs)

    return rnn, (np.zeros((batch, hidden), np.float32), xs, w, u, b)


# ---- numpyro NUTS: eight schools, 500 warm-up, 500 samples ----------------------------------

EIGHT_SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0], np.float32)
EIGHT_SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0], np.float32)


def make_nuts(size: str):
    try:
        import numpyro
        import numpyro.distributions as dist
        from numpyro.infer import MCMC, NUTS
    except ImportError as exc:
        raise RuntimeError("this workload needs numpyro: pip install 'pjrtkit[bench]'") from exc
    warmup, samples = (500, 500) if size == "full" else (10, 10)

    def model(sigma, y=None):
        mu = numpyro.sample("mu", dist.Normal(0, 5))
        tau = numpyro.sample("tau", dist.HalfCauchy(5))
        with numpyro.plate("J", len(sigma)):
            theta = numpyro.sample("theta", dist.Normal(mu, tau))
            numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)

    def run(sigma, y):
        mcmc = MCMC(NUTS(model), num_warmup=warmup, num_samples=samples, progress_bar=False)
        mcmc.run(jax.random.key(0), sigma, y=y)
        draws = mcmc.get_samples()
        # Chains on two backends part ways at the first differently rounded step (NUTS is
        # chaotic); what must agree is the posterior: means well within Monte-Carlo error.
        return jnp.stack([draws["mu"].mean(), jnp.log(draws["tau"]).mean()])

    return run, (EIGHT_SCHOOLS_SIGMA, EIGHT_SCHOOLS_Y)


def posterior_means_agree(actual, expected, loosen: float) -> None:
    """Posterior means of mu and log tau within 1.5 of XLA's (Monte-Carlo error is ~0.3)."""
    a, e = np.asarray(actual), np.asarray(expected)
    if not np.all(np.abs(a - e) <= 1.5):
        raise AssertionError(f"posterior means (mu, log tau) {a.tolist()} vs XLA's {e.tolist()}")


# ---- eager loop: 1000 un-jitted jnp ops on f32[1000] ----------------------------------------

def make_eager(size: str):
    n, ops = (1000, 1000) if size == "full" else (10, 20)
    x0 = np.linspace(-1, 1, n, dtype=np.float32)

    def loop(x):
        x = jnp.asarray(x)
        for _ in range(ops // 4):
            x = x * 0.999          # each line one dispatched op, as a notebook runs them
            x = x + 0.001
            x = jnp.tanh(x)
            x = jnp.maximum(x, -0.5)
        return x

    return loop, (x0,)


# ---- flax MLP data-parallel: 4 devices (pjrtkit_cpu), 8 devices (pjrtkit_tpu) ---------------

def make_flax_dp_mlp(size: str):
    nn, optax = _flax()
    batch, sizes = (256, (784, 512, 512, 10)) if size == "full" else (16, (16, 8, 8, 10))

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            for width in sizes[1:-1]:
                x = nn.relu(nn.Dense(width)(x))
            return nn.Dense(sizes[-1])(x)

    rng = _rng(13)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], batch).astype(np.int32)
    model = MLP()
    params = model.init(jax.random.key(2), x)
    tx = optax.sgd(0.01)
    step = _train_step(model, tx, lambda m, p, b: _xent(m.apply(p, b[0]), b[1]))
    return step, (params, tx.init(params), x, y)


def _dp_step(step):
    return lambda params, opt_state, x, y: step(params, opt_state, (x, y))


def make_flax_dp(size: str):
    step, args = make_flax_dp_mlp(size)
    return _dp_step(step), args


def place_flax_dp(args: tuple, devices: list) -> tuple:
    """Parameters and optimizer state replicated, the batch split over the devices."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(devices), ("data",))
    params, opt_state, x, y = args
    replicated, split = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("data"))
    return (jax.device_put(params, replicated), jax.device_put(opt_state, replicated),
            jax.device_put(x, split), jax.device_put(y, split))


REAL_WORKLOADS: list[Workload] = [
    # Two convolutions and two dense layers forward and backward: accumulation order differs.
    Workload("flax_cnn", "flax CNN step, conv 32/64 3x3, dense 128, batch 64, 28x28, adam",
             1.2, make_flax_cnn, loosen=50, real=True, close=adam_step_close),
    Workload("flax_lm", "flax transformer LM step, d 256, 4 layers, 4 heads, seq 128, batch 8, "
             "adamw", 1.2, make_flax_lm, loosen=100, real=True, close=adam_step_close),
    # 1000 dependent steps of tanh(h@W + x@U + b): rounding compounds along the chain.
    Workload("scan_rnn_large", "scan RNN, 1000 steps, batch 32, hidden 256", 1.2,
             make_scan_rnn_large, loosen=100, real=True),
    # One call is a whole sampling run of 1000 iterations, steady after the first: three calls
    # (not ten) say when, in a fraction of the time.
    Workload("nuts_eight_schools", "numpyro NUTS, eight schools, 500 warm-up + 500 samples",
             1.2, make_nuts, kind="call", real=True, close=posterior_means_agree,
             steady_calls=3),
    # tanh per element: NumPy's and XLA's approximations differ in the last bits.
    Workload("eager_loop", "1000 un-jitted jnp ops on f32[1000]", 1.2, make_eager, kind="call",
             loosen=10, real=True),
    Workload("flax_dp4", "flax MLP step, batch 256 split over 4 devices", 1.2, make_flax_dp,
             loosen=20, devices=4, place=place_flax_dp, real=True),
    # float32 contractions at DEFAULT precision run as one bfloat16 pass on a TPU (as libtpu
    # runs them): compared with XLA cpu's float32 at bfloat16's precision.
    Workload("flax_dp8_tpu", "flax MLP step, batch 256 over a v5e-8 slice (pjrtkit_tpu) vs XLA "
             "cpu x 8", 1.2, make_flax_dp, loosen=3e4, devices=8, place=place_flax_dp,
             real=True, backend="pjrtkit_tpu"),
]
