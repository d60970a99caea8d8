"""Tile configurations of the tiled matmul (``kernels.batched_matmul`` on ``tl.dot``) and the
one-op row reduction (``lowering.reduce``), chosen per GPU architecture and shape class.

A configuration is the kernel's tile constexprs plus Triton's ``num_warps`` / ``num_stages``.
``choose`` decides, in this order:

1. Under emulation (``driver.interprets``): the kind's documented default (``DEFAULTS``, the
   tiles the lowering had before autotuning), always: nothing is timed, so a run is
   deterministic and the kernels are the ones CI has always interpreted.
2. On a GPU: the entry for (architecture, kind, shape class) in the tuned table, the JSON file
   ``PJRTKIT_GPU_TUNED_CONFIGS`` names, else the one this package ships
   (``tuned_configs.json``, written on a GPU and committed).
3. On a GPU with ``PJRTKIT_GPU_AUTOTUNE=PATH`` and no entry: every configuration of the kind's
   small space (``SPACES``) is launched and timed on the device (best of three repetitions);
   the fastest is used, remembered for the process and written to PATH together with the
   table it started from (the file a GPU session brings back and commits).
4. Else the default.

A shape class rounds each size up to a power of two (``shape_class``), so one tuned entry
covers the shapes near the one measured.
"""
from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

TABLE_VARIABLE = "PJRTKIT_GPU_TUNED_CONFIGS"
AUTOTUNE_VARIABLE = "PJRTKIT_GPU_AUTOTUNE"
PACKAGED_TABLE = Path(__file__).with_name("tuned_configs.json")
FORMAT = 1


@dataclasses.dataclass(frozen=True)
class Config:
    """Tile constexprs (``tiles``) and Triton's launch options."""

    tiles: tuple[tuple[str, int], ...]
    num_warps: int = 4
    num_stages: int = 3

    @classmethod
    def of(cls, num_warps: int = 4, num_stages: int = 3, **tiles: int) -> "Config":
        return cls(tuple(sorted(tiles.items())), num_warps, num_stages)

    @property
    def constexprs(self) -> dict[str, int]:
        return dict(self.tiles)

    @property
    def options(self) -> dict[str, int]:
        return {"num_warps": self.num_warps, "num_stages": self.num_stages}

    @property
    def label(self) -> str:
        tiles = "x".join(f"{k}{v}" for k, v in self.tiles)
        return f"{tiles}/w{self.num_warps}/s{self.num_stages}"

    def to_json(self) -> dict[str, int]:
        return {**self.constexprs, **self.options}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Config":
        tiles = {k: int(v) for k, v in data.items()
                 if k not in ("num_warps", "num_stages", "seconds", "candidates")}
        return cls.of(int(data.get("num_warps", 4)), int(data.get("num_stages", 3)), **tiles)


MATMUL = "batched_matmul"
ROW_REDUCE = "row_reduce"

# The defaults: the fixed tiles the lowering used before autotuning (32x32x32: tl.dot needs
# every tile dimension >= 16; 16 rows x 128 columns per reduction step), Triton's default
# launch options.
DEFAULTS = {
    MATMUL: Config.of(BM=32, BN=32, BK=32),
    ROW_REDUCE: Config.of(BM=16, BK=128),
}

# The spaces timed on a GPU: few, so tuning a shape costs well under a second once compiled
# (the device check precompiles every one of them). Shared memory stays under Hopper's 227 KiB
# for float32 at three stages (128x64 + 64x128 float32 tiles: 64 KiB a stage).
SPACES = {
    MATMUL: (
        DEFAULTS[MATMUL],
        Config.of(BM=64, BN=64, BK=32),
        Config.of(BM=128, BN=64, BK=32),
        Config.of(BM=64, BN=128, BK=32),
        Config.of(num_warps=8, BM=128, BN=128, BK=32),
        Config.of(num_warps=8, BM=128, BN=128, BK=64),
        # Hopper's bfloat16/float16 shape (144 KiB of shared memory at three stages; float32
        # needs twice that, more than a GPU has: its launch fails and tuning skips it)
        Config.of(num_warps=8, BM=128, BN=256, BK=64),
    ),
    ROW_REDUCE: (
        DEFAULTS[ROW_REDUCE],
        Config.of(BM=2, BK=1024),
        Config.of(BM=4, BK=512),
        Config.of(BM=8, BK=256),
        Config.of(num_warps=8, BM=2, BK=4096),
        Config.of(BM=32, BK=64),
    ),
}

REPETITIONS = 3
SAMPLE_SECONDS = 0.01


def shape_class(**sizes: int) -> str:
    """``m1024 n1024 k512``: each size rounded up to a power of two."""
    return " ".join(f"{name}{1 << max(0, int(size) - 1).bit_length()}"
                    for name, size in sizes.items())


class _Table:
    """The tuned table of this process: read once, extended by tuning."""

    def __init__(self):
        self._lock = threading.Lock()
        self._loaded: dict | None = None

    def path(self) -> Path:
        named = os.environ.get(TABLE_VARIABLE, "").strip()
        return Path(named) if named else PACKAGED_TABLE

    def data(self) -> dict:
        with self._lock:
            if self._loaded is None:
                self._loaded = read_table(self.path())
            return self._loaded

    def lookup(self, arch: str, kind: str, key: str) -> Config | None:
        entry = self.data().get("configs", {}).get(arch, {}).get(kind, {}).get(key)
        return None if entry is None else Config.from_json(entry)

    def record(self, arch: str, kind: str, key: str, chosen: Config,
               timings: Mapping[str, float], out: Path) -> None:
        with self._lock:
            data = self._loaded if self._loaded is not None else read_table(self.path())
            entry = {**chosen.to_json(), "seconds": timings[chosen.label],
                     "candidates": dict(timings)}
            data.setdefault("configs", {}).setdefault(arch, {}).setdefault(kind, {})[key] = entry
            self._loaded = data
            merged = read_table(out) if out.exists() else {"format": FORMAT, "configs": {}}
            for a, kinds in data.get("configs", {}).items():
                for k, entries in kinds.items():
                    merged["configs"].setdefault(a, {}).setdefault(k, {}).update(entries)
            merged["format"] = FORMAT
            merged["triton"] = _triton_version()
            temporary = out.with_name(f".{out.name}.{os.getpid()}.tmp")
            temporary.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
            os.replace(temporary, out)


def read_table(path: Path) -> dict:
    """The table in ``path`` (``{"format": 1, "configs": {arch: {kind: {key: config}}}}``);
    ValueError naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {"format": FORMAT, "configs": {}}
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a tuned-configuration table ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a tuned-configuration table of format {FORMAT}")
    return data


def _triton_version() -> str:
    """The installed Triton's version, read from its metadata: importing Triton here would fix
    the process's mode (interpreting or compiling, ``triton_setup``) before a driver chose it."""
    from importlib import metadata

    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return "unknown"


TABLE = _Table()


def autotune_output() -> Path | None:
    named = os.environ.get(AUTOTUNE_VARIABLE, "").strip()
    return Path(named) if named else None


def choose(kind: str, key: str, driver, device_index: int,
           measure: Callable[[Config], float] | None = None) -> Config:
    """The configuration of ``kind`` for the shape class ``key`` on ``driver``'s device
    (module docstring). ``measure(config)``: seconds of one launch with ``config`` (the
    caller's inputs, launched and synchronized); used only when tuning."""
    if driver.interprets:
        return DEFAULTS[kind]
    arch = driver.devices()[device_index].arch
    found = TABLE.lookup(arch, kind, key)
    if found is not None:
        return found
    out = autotune_output()
    if out is None or measure is None:
        return DEFAULTS[kind]
    timings = {}
    for config in SPACES[kind]:
        try:
            timings[config.label] = measure(config)
        except Exception:  # noqa: BLE001 - a configuration that cannot compile or launch here
            continue       # (resources) is not a candidate; the others still are
    if not timings:
        return DEFAULTS[kind]
    chosen = min(SPACES[kind], key=lambda c: (timings.get(c.label, float("inf")),
                                              SPACES[kind].index(c)))
    TABLE.record(arch, kind, key, chosen, timings, out)
    return chosen


def time_launches(launch: Callable[[], None], synchronize: Callable[[], None]) -> float:
    """Seconds per launch: one warm-up (compiles and loads), then the best of
    ``REPETITIONS`` samples of enough launches to last ``SAMPLE_SECONDS``."""
    launch()
    synchronize()
    start = time.perf_counter()
    launch()
    synchronize()
    once = max(time.perf_counter() - start, 1e-6)
    count = max(1, min(100, int(SAMPLE_SECONDS / once)))
    best = float("inf")
    for _ in range(REPETITIONS):
        start = time.perf_counter()
        for _ in range(count):
            launch()
        synchronize()
        best = min(best, (time.perf_counter() - start) / count)
    return best
