"""The TPU generations the backend models, with the facts libtpu reports for them (jax 0.10.2 +
libtpu 0.0.42.1 compile-only topologies) and Google's public peak figures per chip.

Everything generation-specific lives in this one table; topologies, HBM limits and the
roofline read it.
"""
from __future__ import annotations

import dataclasses

from pjrtkit.errors import InvalidArgument

GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Generation:
    """One TPU generation.

    ``device_kind`` and ``hbm_bytes`` (per device, what libtpu's compile reports as "available
    HBM") are libtpu's; ``devices_per_chip`` is how many JAX devices one chip is (2 on v4 without
    megacore and on 7x). ``name_rank`` is how many bounds a topology name gives (``v5e:2x4``: 2,
    ``v4:2x2x1``: 3). ``peak_bf16_flops`` and ``hbm_bytes_per_s`` are per chip.
    """

    name: str
    aliases: tuple[str, ...]
    device_kind: str
    devices_per_chip: int
    hbm_bytes: int
    vmem_bytes: int
    name_rank: int
    peak_bf16_flops: float
    hbm_bytes_per_s: float

    @property
    def peak_flops_per_device(self) -> float:
        return self.peak_bf16_flops / self.devices_per_chip

    @property
    def hbm_bytes_per_s_per_device(self) -> float:
        return self.hbm_bytes_per_s / self.devices_per_chip


def _gib(value: float) -> int:
    return int(round(value * GIB))


GENERATIONS = (
    Generation("v4", ("v4",), "TPU v4", 2, _gib(15.25), 16 << 20, 3, 275e12, 1200e9),
    Generation("v5e", ("v5e", "v5litepod", "v5lite"), "TPU v5 lite", 1, _gib(15.75), 128 << 20, 2,
               197e12, 819e9),
    Generation("v5p", ("v5p",), "TPU v5", 1, _gib(95.74), 64 << 20, 3, 459e12, 2765e9),
    Generation("v6e", ("v6e",), "TPU v6 lite", 1, _gib(31.25), 128 << 20, 2, 918e12, 1640e9),
    Generation("7x", ("tpu7x", "7x"), "TPU7x", 2, _gib(94.75), 64 << 20, 3, 2307e12, 7380e9),
)

_BY_ALIAS = {alias: g for g in GENERATIONS for alias in g.aliases}


def generation(name: str) -> Generation:
    """The generation named ``name`` (``"v5e"``, ``"tpu7x"``, ...); InvalidArgument otherwise."""
    try:
        return _BY_ALIAS[name.lower()]
    except KeyError:
        raise InvalidArgument(f"pjrtkit_tpu: unknown TPU generation {name!r}; known: "
                              f"{', '.join(sorted(_BY_ALIAS))}") from None


def generation_of_kind(device_kind: str) -> Generation:
    for g in GENERATIONS:
        if g.device_kind == device_kind:
            return g
    raise InvalidArgument(f"pjrtkit_tpu: no TPU generation has device kind {device_kind!r}")
