"""Fused loops split over cores (``pjrtkit_cpu.fusion.parallel``): a loop run in parts gives the
bits it gives whole, for a flat loop, a loop over rows with a broadcast input and a row program
(layernorm); parts go to spare cores only, and never during a launch that runs devices on
threads of its own."""
import jax.numpy as jnp
import numpy as np
import pytest

from pjrtkit.lowering.plan import build_plan
from pjrtkit.testing.programs import lower_program

from pjrtkit_cpu import blas
from pjrtkit_cpu.fusion import cache, fuse_program, parallel

from fusion_support import layernorm, normal

pytestmark = pytest.mark.usefixtures("private_fusion_cache")


def _chain(a):
    return jnp.tanh(a) * 2.5 + 1


def _broadcast(a, b):
    return jnp.maximum(a * b, 0.0)


def _run(fn, args, registry, parts: int):
    """``fn``'s outputs with every compiled loop split in ``parts`` (1: whole), and the parts
    the split used."""
    program = fuse_program(lower_program(fn, *args))
    plan = build_plan(program, registry)
    flat = [np.asarray(a) for a in args]
    seen = []
    original = parallel.parts

    def forced(units, elements):
        count = min(parts, units)
        seen.append(count)
        return count

    with np.errstate(all="ignore"):
        plan(*flat)
        cache.wait_all(timeout=120)
        parallel.parts = forced
        try:
            outputs = [np.asarray(o) for o in plan(*flat)]
        finally:
            parallel.parts = original
    return outputs, seen


@pytest.mark.parametrize("name", ["flat", "broadcast", "layernorm"])
def test_a_loop_in_parts_gives_the_bits_it_gives_whole(name, registry):
    rng = np.random.default_rng(3)
    cases = {
        "flat": (_chain, (normal(rng, 3, 1 << 15),)),
        "broadcast": (_broadcast, (normal(rng, 257, 512), normal(rng, 512))),
        "layernorm": (layernorm, (normal(rng, 301, 256), normal(rng, 256), normal(rng, 256))),
    }
    fn, args = cases[name]
    whole, seen_whole = _run(fn, args, registry, 1)
    split, seen_split = _run(fn, args, registry, 3)
    assert seen_whole and all(c == 1 for c in seen_whole)
    assert seen_split and all(c == 3 for c in seen_split), seen_split
    for a, b in zip(whole, split):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_parts_go_to_spare_cores_only_and_never_during_a_parallel_launch(monkeypatch):
    big = 8 * parallel.MIN_ELEMENTS_PER_PART
    monkeypatch.setattr(blas, "spare_cores", lambda: 1)
    assert parallel.parts(1000, big) == 2
    assert parallel.parts(1, big) == 1  # one row cannot be split
    assert parallel.parts(1000, parallel.MIN_ELEMENTS_PER_PART) == 1  # too small to pay
    monkeypatch.setattr(blas, "spare_cores", lambda: 0)
    assert parallel.parts(1000, big) == 1
    monkeypatch.setattr(blas, "spare_cores", lambda: 5)
    monkeypatch.setattr(blas, "_parallel", 1)
    assert parallel.parts(1000, big) == 1
    monkeypatch.setattr(parallel, "ENABLED", False)
    monkeypatch.setattr(blas, "_parallel", 0)
    assert parallel.parts(1000, big) == 1


def test_an_error_in_a_helper_s_part_reaches_the_caller(monkeypatch):
    monkeypatch.setattr(parallel, "parts", lambda units, elements: 2)
    ran = []

    def kernel(lo, hi):
        ran.append((lo, hi))
        if lo > 0:
            raise ValueError("a part failed")

    with pytest.raises(ValueError, match="a part failed"):
        parallel.run(kernel, [], 10, 10)
    assert sorted(ran) == [(0, 5), (5, 10)]
