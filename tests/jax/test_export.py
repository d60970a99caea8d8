"""jax.export on pjrtkit platforms: a function exported for ``cpu`` runs on pjrtkit_cpu (like
cpu), one exported for ``tpu`` on pjrtkit_tpu (like tpu), with the custom calls those exports
carry (LAPACK's FFI targets on cpu, ``Eigh``/``LuDecomposition`` on tpu); results compared
with XLA's CPU backend running the same export in this process."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from pjrtkit import jax_compat
from pjrtkit.jax_export import as_like_platforms
from pjrtkit.testing.tolerances import assert_close


def _model(params, x):
    # Well conditioned in the inputs' own type (also when another test module turned x64 on):
    # an eigenvalue near 0 of hidden.T @ hidden moved by 1e-4 of itself for a one-ulp change
    # of tanh, past float32's tolerance, and x64 compared that float32 error at float64's.
    hidden = jnp.tanh(x @ params["w"] + params["b"])
    gram = hidden.T @ hidden + 3 * jnp.eye(3, dtype=x.dtype)
    solved = jnp.linalg.solve(gram, hidden.T)  # LAPACK getrf/trsm
    eigenvalues = jnp.linalg.eigvalsh(gram)  # LAPACK syevd
    return solved.sum(axis=1) * eigenvalues


@pytest.fixture(autouse=True)
def x64_off():
    """These exports are float32 programs: run them with x64 off even where another test
    module turned it on for the whole process (plugins/cpu/tests/conftest.py does)."""
    with jax.enable_x64(False):
        yield


@pytest.mark.xfail(strict=True, reason="known: with x64 on, the platform index of a "
                   "multi-platform export is int64 and reaches stablehlo.case through a "
                   "convert; pjrtkit compiles every branch, and the cuda branch's "
                   "cusolver_getrf_ffi is UNIMPLEMENTED on pjrtkit_cpu")
def test_a_multi_platform_export_with_x64_on(devices):
    params, x = _inputs()
    with jax.enable_x64(True):
        exported = export.export(jax.jit(_model), platforms=("tpu", "cuda", "cpu"))(params, x)
        ours, theirs = (_call_on(device, exported, params, x) for device in devices)
    assert_close(ours, theirs, what="multi-platform export, x64 on")


def _inputs():
    rng = np.random.RandomState(0)
    params = {"w": rng.randn(4, 3).astype(np.float32), "b": rng.randn(3).astype(np.float32)}
    return params, rng.randn(5, 4).astype(np.float32)


def _call_on(device, exported, *args):
    placed = jax.device_put(args, device)
    return np.asarray(exported.call(*placed))


@pytest.mark.parametrize("platforms", [("cpu",), ("cpu", "tpu"), ("tpu", "cuda", "cpu")])
def test_an_export_for_cpu_runs_on_pjrtkit_cpu_as_on_xla(devices, platforms):
    params, x = _inputs()
    exported = export.export(jax.jit(_model), platforms=platforms)(params, x)
    # shipped: serialized and read back, as a user loads a model
    loaded = export.deserialize(exported.serialize())
    ours, theirs = (_call_on(device, loaded, params, x) for device in devices)
    assert_close(ours, theirs, what=f"export for {platforms}")


def test_an_export_for_cpu_inside_jit_on_pjrtkit_cpu(devices):
    params, x = _inputs()
    exported = export.export(jax.jit(_model), platforms=("cpu",))(params, x)
    results = [np.asarray(jax.jit(lambda p, v: exported.call(p, v) * 2)(
        *jax.device_put((params, x), device))) for device in devices]
    assert_close(results[0], results[1], what="exported call inside jit")


def test_an_export_for_another_platform_is_refused_naming_both(devices):
    device, _ = devices
    exported = export.export(jax.jit(jnp.sin), platforms=("tpu",))(np.float32(1))
    with pytest.raises(ValueError, match=r"exported for platforms '\('tpu',\)' but it is used "
                                         r"on '\('pjrtkit_cpu',\)'"):
        _call_on(device, exported, np.float32(1))


def test_an_export_naming_pjrtkit_cpu_itself_keeps_its_own_branch():
    assert as_like_platforms(("pjrtkit_cpu",), ("cpu", "pjrtkit_cpu"), "pjrtkit_cpu",
                             "cpu") == ("pjrtkit_cpu",)
    assert as_like_platforms(("pjrtkit_cpu",), ("tpu", "cpu"), "pjrtkit_cpu", "cpu") == ("cpu",)
    assert as_like_platforms(("pjrtkit_cpu", "cuda"), ("cpu", "cuda"), "pjrtkit_cpu",
                             "cpu") == ("cpu", "cuda")
    assert as_like_platforms(("pjrtkit_cpu",), ("tpu",), "pjrtkit_cpu", "cpu") == (
        "pjrtkit_cpu",)


def test_jax_still_has_the_export_internals_pjrtkit_uses():
    primitive, rule = jax_compat.exported_call_rule()
    assert primitive.name == "call_exported" and callable(rule)
    targets = jax_compat.cpu_stable_custom_call_targets()
    assert "lapack_sgetrf_ffi" in targets and "lapack_zheevd_ffi" in targets


def test_an_export_for_cpu_runs_with_pjrtkit_cpu_alone(run_python):
    result = run_python("""
        import jax, jax.numpy as jnp, numpy as np
        from jax import export
        a = np.arange(9.0, dtype=np.float32).reshape(3, 3) + 4 * np.eye(3, dtype=np.float32)
        exported = export.export(jax.jit(jnp.linalg.inv), platforms=("cpu",))(a)
        text = exported.mlir_module()
        assert "lapack_sgetrf_ffi" in text and "pjrtkit_" not in text
        assert jax.devices()[0].platform == "pjrtkit_cpu"
        np.testing.assert_allclose(exported.call(a), np.linalg.inv(a), rtol=1e-5, atol=1e-5)
        # JAX's default: an export made without platforms is for the default backend
        assert export.export(jax.jit(jnp.sin))(a).platforms == ("pjrtkit_cpu",)
        print("ok")
    """, JAX_PLATFORMS="pjrtkit_cpu")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_an_export_for_tpu_runs_on_pjrtkit_tpu(run_python):
    result = run_python("""
        import jax, jax.numpy as jnp, numpy as np
        from jax import export
        a = np.random.RandomState(0).randn(2, 4, 4).astype(np.float32)
        def f(a):
            s = a + jnp.swapaxes(a, -1, -2)
            w, v = jnp.linalg.eigh(s)                 # custom call @Eigh on tpu
            lu, pivots, perm = jax.lax.linalg.lu(a)   # custom call @LuDecomposition
            q, r = jnp.linalg.qr(a)                   # @Qr, @ProductOfElementary...
            # HIGHEST: a TPU's float32 matmul is one bfloat16 pass at the default precision
            rebuilt = jnp.einsum("bij,bj,bkj->bik", v, w, v, precision="highest")
            return w, jnp.abs(rebuilt - s).max(), lu, pivots, perm, \\
                jnp.abs(jnp.matmul(q, r, precision="highest") - a).max()
        exported = export.deserialize(export.export(jax.jit(f), platforms=("cpu", "tpu"))(a)
                                      .serialize())
        text = export.export(jax.jit(f), platforms=("tpu",))(a).mlir_module()
        assert "@Eigh" in text and "@LuDecomposition" in text
        tpu = jax.devices("pjrtkit_tpu")[0]
        ours = exported.call(jax.device_put(a, tpu))
        reference = exported.call(jax.device_put(a, jax.devices("cpu")[0]))
        np.testing.assert_allclose(ours[0], reference[0], rtol=2e-5, atol=2e-5)  # eigenvalues
        assert float(ours[1]) < 1e-4 and float(ours[5]) < 1e-4  # reconstructions
        for i in (2, 3, 4):
            np.testing.assert_allclose(ours[i], reference[i], rtol=2e-5, atol=2e-5)
        print("ok")
    """, JAX_PLATFORMS="pjrtkit_tpu,cpu")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_an_export_with_an_ordered_effect_threads_its_token_on_pjrtkit_cpu(devices):
    """The renamed lowering context hands the effect's output token back to JAX."""
    import dataclasses

    from jax._src import core, effects
    from jax._src.interpreters import mlir

    @dataclasses.dataclass(frozen=True)
    class OrderedForExportTest(effects.Effect):
        pass

    effect = OrderedForExportTest()
    for allowed in (effects.lowerable_effects, effects.control_flow_allowed_effects,
                    effects.ordered_effects):
        allowed.add_type(OrderedForExportTest)
    doubling = core.Primitive("pjrtkit_test_doubling_with_ordered_effect")
    doubling.def_effectful_abstract_eval(lambda aval: (aval, {effect}))

    def lowering(ctx, a):
        ctx.set_tokens_out(mlir.TokenSet({effect: ctx.tokens_in.get(effect)}))
        return [mlir.hlo.add(a, a)]

    mlir.register_lowering(doubling, lowering)
    x = np.arange(3, dtype=np.float32)
    exported = export.export(jax.jit(lambda v: doubling.bind(v) + 1),
                             platforms=("cpu", "tpu"))(x)
    assert exported.ordered_effects == (effect,)
    ours, theirs = (_call_on(device, exported, x) for device in devices)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, 2 * x + 1)
