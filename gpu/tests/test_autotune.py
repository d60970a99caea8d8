"""autotune: the documented default under emulation (nothing timed), the tuned table on a GPU,
tuning (the fastest measured candidate, ties to the earlier one, written with the table it
started from) only when asked for; the table this package ships is well formed.

``choose`` reads two things of a driver: ``interprets`` and the device's ``arch``. A GPU here
is the smallest object with those two (there is no GPU on this machine); the emulated driver
is the real one. The timings ``measure`` returns in the tuning tests are given, so the choice
the test checks follows from them."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pjrtkit_gpu import autotune
from pjrtkit_gpu.drivers.base import DeviceFacts

from gpu_support import emulated_driver, sample


class Hopper:
    """What choose() reads of a compiled-kernel driver on an sm_90 device."""

    interprets = False

    def devices(self):
        return (DeviceFacts("NVIDIA H100", 80 << 30, "sm_90", 132, 32),)


@pytest.fixture
def fresh_table(monkeypatch, tmp_path):
    monkeypatch.setattr(autotune, "TABLE", autotune._Table())  # noqa: SLF001 - per test
    monkeypatch.delenv(autotune.AUTOTUNE_VARIABLE, raising=False)
    monkeypatch.delenv(autotune.TABLE_VARIABLE, raising=False)
    return tmp_path


def _never(config):
    raise AssertionError(f"measured {config.label}")


@pytest.mark.parametrize("kind", [autotune.MATMUL, autotune.ROW_REDUCE])
def test_emulation_takes_the_documented_default_and_times_nothing(fresh_table, monkeypatch,
                                                                   kind):
    monkeypatch.setenv(autotune.AUTOTUNE_VARIABLE, str(fresh_table / "out.json"))
    driver = emulated_driver()
    assert autotune.choose(kind, "any", driver, 0, _never) == autotune.DEFAULTS[kind]
    assert not (fresh_table / "out.json").exists()


def test_a_gpu_without_table_entry_or_tuning_takes_the_default(fresh_table):
    config = autotune.choose(autotune.MATMUL, "float32->float32 m64", Hopper(), 0, _never)
    assert config == autotune.DEFAULTS[autotune.MATMUL]
    assert config.constexprs == {"BM": 32, "BN": 32, "BK": 32}


def test_a_gpu_takes_the_tuned_table_entry(fresh_table, monkeypatch):
    table = fresh_table / "table.json"
    entry = {"BM": 128, "BN": 64, "BK": 32, "num_warps": 4, "num_stages": 3}
    table.write_text(json.dumps({"format": 1, "configs": {"sm_90": {autotune.MATMUL: {
        "float32->float32 z1 m1024 n1024 k1024": entry}}}}))
    monkeypatch.setenv(autotune.TABLE_VARIABLE, str(table))
    chosen = autotune.choose(autotune.MATMUL, "float32->float32 z1 m1024 n1024 k1024", Hopper(),
                             0, _never)
    assert chosen.to_json() == entry
    other = autotune.choose(autotune.MATMUL, "float32->float32 z1 m64 n64 k64", Hopper(), 0,
                            _never)
    assert other == autotune.DEFAULTS[autotune.MATMUL]


def test_tuning_takes_the_fastest_skips_what_fails_and_writes_the_table(fresh_table,
                                                                        monkeypatch):
    out = fresh_table / "tuned.json"
    monkeypatch.setenv(autotune.AUTOTUNE_VARIABLE, str(out))
    space = autotune.SPACES[autotune.ROW_REDUCE]
    seconds = {c.label: 1.0 + i for i, c in enumerate(space)}
    seconds[space[3].label] = 0.5          # the fastest
    seconds[space[4].label] = 0.5          # as fast, later in the space: not chosen
    failing = space[1].label               # e.g. too much shared memory on this device

    def measure(config):
        if config.label == failing:
            raise RuntimeError("out of resources")
        return seconds[config.label]

    key = "stablehlo.multiply float32 rows4096 columns1024"  # not in the shipped table
    chosen = autotune.choose(autotune.ROW_REDUCE, key, Hopper(), 0, measure)
    assert chosen == space[3]
    written = json.loads(out.read_text())
    entry = written["configs"]["sm_90"][autotune.ROW_REDUCE][key]
    assert autotune.Config.from_json(entry) == space[3]
    assert failing not in entry["candidates"] and len(entry["candidates"]) == len(space) - 1
    # remembered for the process: asked again, nothing is measured
    assert autotune.choose(autotune.ROW_REDUCE, key, Hopper(), 0, _never) == space[3]


def test_the_shipped_table_is_well_formed_and_holds_only_configurations_of_the_spaces():
    data = autotune.read_table(autotune.PACKAGED_TABLE)
    for arch, kinds in data["configs"].items():
        assert arch.startswith(("sm_", "gfx")), arch
        for kind, entries in kinds.items():
            for key, entry in entries.items():
                assert autotune.Config.from_json(entry) in autotune.SPACES[kind], (kind, key)


def test_a_damaged_table_is_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not a tuned-configuration table"):
        autotune.read_table(bad)


def test_shape_classes_round_up_to_powers_of_two():
    assert autotune.shape_class(z=1, m=1000, n=1024, k=1025) == "z1 m1024 n1024 k2048"
    assert autotune.shape_class(rows=0, columns=3) == "rows1 columns4"


FORCED = [(autotune.MATMUL, c) for c in autotune.SPACES[autotune.MATMUL][1::2]] + \
    [(autotune.ROW_REDUCE, c) for c in autotune.SPACES[autotune.ROW_REDUCE][1::2]]


@pytest.mark.parametrize("kind, config", FORCED, ids=lambda v: getattr(v, "label", v))
def test_configurations_of_the_spaces_compute_what_xla_computes(monkeypatch, agrees_with_xla,
                                                                 kind, config):
    """A configuration tuning may choose is a correct kernel, not only a fast one: forced as
    the choice (the emulated driver runs it), a matmul and a row sum agree with XLA's CPU
    backend on shapes that are not multiples of its tiles."""
    import jax.numpy as jnp

    monkeypatch.setitem(autotune.DEFAULTS, kind, config)
    if kind == autotune.MATMUL:
        # K = 150 products of magnitude ~9 summed in another order than XLA's: entries that
        # nearly cancel differ past float32's own tolerance (as the default tiles' do)
        agrees_with_xla(lambda a, b: a @ b, sample("a", (70, 150), "float32"),
                        sample("b", (150, 90), "float32"), loosen=20)
    else:
        agrees_with_xla(lambda x: jnp.sum(x, axis=1), sample("x", (5, 700), "float32"))


def test_writing_a_tuned_table_leaves_triton_unimported(tmp_path):
    """Tuning records Triton's version without importing Triton: an import would fix the
    process's mode (compiling) before the emulated driver chose to interpret (a test that tuned
    first once made every later emulated kernel of its pytest worker fail)."""
    script = f"""
import sys
from pjrtkit_gpu import autotune
from pjrtkit_gpu.drivers.base import DeviceFacts

class Hopper:
    interprets = False
    def devices(self):
        return (DeviceFacts("NVIDIA H100", 80 << 30, "sm_90", 132, 32),)

space = autotune.SPACES[autotune.ROW_REDUCE]
autotune.choose(autotune.ROW_REDUCE, "k", Hopper(), 0, lambda c: space.index(c) + 1.0)
assert "triton" not in sys.modules, "autotune imported triton"
print(open({str(tmp_path / 'out.json')!r}).read())
"""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PJRTKIT_GPU_EMULATE", "TRITON_INTERPRET")}
    env[autotune.AUTOTUNE_VARIABLE] = str(tmp_path / "out.json")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    from importlib import metadata

    assert json.loads(run.stdout)["triton"] == metadata.version("triton")
