"""A fuzz harness over programs: damaged portable artifacts, real programs' ops with bad
attributes or mismatched shapes, and random dense constants of every element type.

The property under test: loading and compiling any of them either succeeds or raises a
PjrtError with a code (INVALID_ARGUMENT for a malformed program), and the process lives. A
case that raises anything else is a bug; a decoded constant that differs from the array it was
made from is a bug; a process that dies is an abort, one that stops answering a hang. With the
runtime's isolated parser (the default), a parser crash or hang is contained and reported as
INVALID_ARGUMENT; the summary counts those as "crash-contained" and "hang-contained". Cases
run in batches in child processes, so an abort is counted (and the batch goes on after it)
instead of ending the campaign.

Targets:
  artifact   real programs' portable artifacts, truncated, bit-flipped, overwritten, spliced
  ops        real programs' MLIR text with one op's attribute or operand type changed
  constants  random dense constants (every element type, splat/list/hex forms, empty, scalar)

Cases are generated from (target, seed, index), so any case can be re-created. Run
``python -m pjrtkit_tools.fuzz_programs --cases 500`` (``make fuzz``); ``--in-process``
parses in the harness's own process instead of the runtime's isolated parser, to measure what
the isolation contains.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from collections.abc import Callable

import ml_dtypes
import numpy as np

from pjrtkit_tools.fuzz_children import run_campaigns, run_in_children, summarize

TARGETS = ("artifact", "ops", "constants")


# -- the real programs the mutations start from ---------------------------------------------
def _base_programs() -> dict[str, tuple[Callable, tuple]]:
    import jax
    import jax.numpy as jnp
    from jax import lax

    def mlp(w, b, x):
        return jax.grad(lambda w: jnp.sum(jax.nn.relu(x @ w + b) ** 2))(w)

    def conv(x, k):
        return lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def loop(x):
        return lax.fori_loop(0, 3, lambda i, v: v * 0.5 + i, x)

    def indexing(x, i):
        return x[i].sum() + x.at[i].add(1.0).sum() + jnp.sort(x, axis=0)[0].sum()

    def reductions(x):
        return jnp.max(x, axis=1), jnp.cumsum(x, axis=0), jax.nn.softmax(x), x.T.reshape(-1)

    def random_normal(key):
        return jax.random.normal(key, (3,))

    f32 = np.float32
    return {
        "mlp": (mlp, (np.ones((8, 4), f32), np.zeros(4, f32), np.ones((2, 8), f32))),
        "conv": (conv, (np.ones((1, 5, 5, 2), f32), np.ones((3, 3, 2, 4), f32))),
        "loop": (loop, (np.ones(5, f32),)),
        "indexing": (indexing, (np.arange(12.0, dtype=f32).reshape(4, 3), np.array([0, 2]))),
        "reductions": (reductions, (np.arange(12.0, dtype=f32).reshape(3, 4),)),
        "random_normal": (random_normal, (np.zeros(2, np.uint32),)),
    }


class Programs:
    """Artifacts and MLIR text of the base programs, made once per process."""

    def __init__(self):
        import jax
        from jaxlib.mlir.dialects import stablehlo

        from pjrtkit import jax_compat

        self.artifacts: list[bytes] = []
        self.texts: list[str] = []
        for fn, args in _base_programs().values():
            text = jax.jit(fn).lower(*args).as_text()
            self.texts.append(text)
            self.artifacts.append(jax_compat.serialize_portable_artifact(
                text, stablehlo.get_current_version()))


# -- case generators ------------------------------------------------------------------------
def _mutate_artifact(rng: random.Random, programs: Programs) -> bytes:
    data = bytearray(rng.choice(programs.artifacts))
    kind = rng.choice(["truncate", "flip", "overwrite", "splice", "delete", "duplicate"])
    if kind == "truncate":
        return bytes(data[:rng.randrange(len(data))])
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif kind == "overwrite":
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == "splice":
        other = rng.choice(programs.artifacts)
        return bytes(data[:rng.randrange(len(data))] + other[rng.randrange(len(other)):])
    else:
        start = rng.randrange(len(data))
        chunk = data[start:start + rng.randint(1, 16)]
        if kind == "delete":
            del data[start:start + len(chunk)]
        else:
            data[start:start] = chunk
    return bytes(data)


_TENSOR = re.compile(r"tensor<((?:\d+x)*)([a-z][a-z0-9]*)>")
_NUMBER = re.compile(r"(?<![\w%#@.])-?\d+(?![\w.])")
_BAD_NUMBERS = ["-1", "0", "1", "2", "7", "64", "-9223372036854775808", "4294967296", "999999"]
_ELEMENT_SWAPS = ["f32", "f16", "bf16", "f64", "i32", "i1", "ui8", "i64", "complex<f32>"]


def _mutate_ops(rng: random.Random, programs: Programs) -> str:
    lines = rng.choice(programs.texts).splitlines()
    candidates = [i for i, line in enumerate(lines) if "=" in line and (
        "stablehlo." in line or "sdy." in line or "call" in line)]
    i = rng.choice(candidates)
    line = lines[i]
    kind = rng.choice(["attribute-number", "attribute-number", "operand-shape", "element-type",
                       "drop-list-element"])
    if kind == "attribute-number":
        numbers = list(_NUMBER.finditer(line.split(":")[0] if ":" in line else line))
        if numbers:
            m = rng.choice(numbers)
            line = line[:m.start()] + rng.choice(_BAD_NUMBERS) + line[m.end():]
    elif kind in ("operand-shape", "element-type"):
        tensors = list(_TENSOR.finditer(line))
        if tensors:
            m = rng.choice(tensors)
            dims = [d for d in m.group(1).split("x") if d]
            if kind == "operand-shape":
                if dims and rng.random() < 0.7:
                    j = rng.randrange(len(dims))
                    dims[j] = str(rng.choice([0, 1, 2, 3, 5, 8, int(dims[j]) + 1]))
                else:
                    dims.append(str(rng.randint(1, 4)))
                element = m.group(2)
            else:
                element = rng.choice(_ELEMENT_SWAPS)
            shape = "".join(f"{d}x" for d in dims)
            line = line[:m.start()] + f"tensor<{shape}{element}>" + line[m.end():]
    else:
        lists = list(re.finditer(r"\[([^\[\]]*,[^\[\]]*)\]", line))
        if lists:
            m = rng.choice(lists)
            items = m.group(1).split(",")
            del items[rng.randrange(len(items))]
            line = line[:m.start()] + "[" + ",".join(items) + "]" + line[m.end():]
    lines[i] = line
    return "\n".join(lines)


_CONSTANT_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                    np.uint32, np.uint64, np.float16, np.float32, np.float64, np.complex64,
                    np.complex128, ml_dtypes.bfloat16, ml_dtypes.int4, ml_dtypes.uint4,
                    ml_dtypes.int2, ml_dtypes.uint2, ml_dtypes.float8_e4m3fn,
                    ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3b11fnuz,
                    ml_dtypes.float4_e2m1fn]


def _random_constant(rng: random.Random) -> np.ndarray:
    dtype = np.dtype(rng.choice(_CONSTANT_DTYPES))
    rank = rng.choice([0, 1, 1, 2, 3])
    shape = tuple(rng.choice([0, 1, 2, 3, 7, 16, 60]) for _ in range(rank))
    size = int(np.prod(shape, dtype=np.int64))
    gen = np.random.default_rng(rng.randrange(1 << 30))
    raw = gen.integers(0, 256, size=size * dtype.itemsize, dtype=np.uint8)
    if dtype == np.bool_:
        values = (raw & 1).astype(np.bool_)
    elif dtype in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.int2)):
        bits = 4 if dtype == np.dtype(ml_dtypes.int4) else 2
        values = ((raw.astype(np.int16) % (1 << bits)) - (1 << (bits - 1))).astype(dtype)
    elif dtype in (np.dtype(ml_dtypes.uint4), np.dtype(ml_dtypes.uint2)):
        bits = 4 if dtype == np.dtype(ml_dtypes.uint4) else 2
        values = (raw % (1 << bits)).astype(dtype)
    elif dtype == np.dtype(ml_dtypes.float4_e2m1fn):
        values = (raw & 0x0F).view(dtype)
    else:
        values = raw.view(dtype)  # every bit pattern: NaNs with payloads, infinities, ...
    values = values.reshape(shape)
    if size and rng.random() < 0.3:  # a splat
        values = np.full(shape, values.ravel()[0], dtype=dtype)
    return values


# -- running cases ----------------------------------------------------------------------------
class Runner:
    """Loads and compiles cases in this process and classifies each outcome."""

    def __init__(self, isolated: bool, backend_name: str = "cpu"):
        from pjrtkit.discovery import load_backend
        from pjrtkit.types import CompileOptions

        self.isolated = isolated
        self.programs = Programs()
        self.backend = load_backend(backend_name)
        self.device = self.backend.client_topology(options={}).devices[0]
        self.options = CompileOptions(num_replicas=1, num_partitions=1,
                                      device_assignment=((self.device.id,),),
                                      use_spmd_partitioning=False)

    def case(self, target: str, seed: int, index: int):
        rng = random.Random(f"{target}/{seed}/{index}")
        if target == "artifact":
            return _mutate_artifact(rng, self.programs)
        if target == "ops":
            return _mutate_ops(rng, self.programs)
        return _random_constant(rng)

    def run(self, target: str, seed: int, index: int) -> str:
        """The outcome: "ok", "error:CODE", "crash-contained" or "bug:<what>"."""
        from pjrtkit.errors import PjrtError
        from pjrtkit.stablehlo.loader import load_program

        case = self.case(target, seed, index)
        try:
            if target == "constants":
                return self._check_constant(case)
            program = load_program(case, isolated=self.isolated)
            self.backend.compile(program=program, options=self.options, devices=(self.device,))
            return "ok"
        except PjrtError as exc:
            if "crashed jaxlib's StableHLO parser" in exc.message:
                return "crash-contained"
            if "parsing the program took longer" in exc.message:
                return "hang-contained"
            return f"error:{exc.code.name}"
        except Exception as exc:  # noqa: BLE001 - anything else is what the fuzzer looks for
            return f"bug:{type(exc).__name__}: {str(exc)[:300]}"

    def _check_constant(self, array: np.ndarray) -> str:
        from pjrtkit.stablehlo.ir import walk_ops
        from pjrtkit.stablehlo.loader import load_program
        from pjrtkit.testing.programs import portable_artifact

        program = load_program(portable_artifact(lambda: array), isolated=self.isolated)
        found = [op.attributes["value"] for op in walk_ops(program)
                 if op.name == "stablehlo.constant"]
        if not any(isinstance(c, np.ndarray) and c.dtype == array.dtype and
                   c.shape == array.shape and c.tobytes() == array.tobytes() for c in found):
            return f"bug:constant {array.dtype}{list(array.shape)} decoded differently"
        return "ok"


def _child(target: str, seed: int, start: int, stop: int, isolated: bool) -> None:
    runner = Runner(isolated)
    # the harness's own test: this case kills its process, as a parser abort would
    abort_at = os.environ.get("PJRTKIT_FUZZ_ABORT_AT")
    for index in range(start, stop):
        print(json.dumps({"start": index}), flush=True)
        if abort_at is not None and index == int(abort_at):
            os.abort()
        print(json.dumps({"index": index, "outcome": runner.run(target, seed, index)}),
              flush=True)


def run_campaign(target: str, cases: int, seed: int = 0, isolated: bool = True,
                 batch: int = 250) -> dict:
    """Run ``cases`` cases of ``target`` in child processes; a summary dict."""
    # The cpu plugin's Numba kernels (fused loops, native loops) compile in the background
    # after the plan is built and cost most of a case's time; they are off unless asked for.
    # A damaged artifact can make jaxlib's deserializer loop forever: the isolated parser is
    # stopped after 20 s (the runtime's default is 600 s).
    env = {"PJRTKIT_CPU_FUSION": "0", "PJRTKIT_CPU_NATIVE_LOOPS": "0",
           "PJRTKIT_PARSER_TIMEOUT_S": "20", **os.environ,
           "JAX_PLATFORMS": "cpu", "JAX_ENABLE_X64": "1"}

    def command_for(start: int, stop: int) -> list[str]:
        return ([sys.executable, "-m", "pjrtkit_tools.fuzz_programs", "--child", target,
                 str(seed), str(start), str(stop)] + ([] if isolated else ["--in-process"]))

    return summarize(run_in_children(command_for, cases, env, batch), target=target, seed=seed,
                     isolated=isolated)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=500, help="cases per target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--in-process", action="store_true",
                        help="parse in the harness's process, not in the isolated parser")
    parser.add_argument("--json", help="write the summaries to this file")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        target, seed, start, stop = args.child
        _child(target, int(seed), int(start), int(stop), not args.in_process)
        return 0
    return run_campaigns(args.targets.split(","),
                         lambda target: run_campaign(target, args.cases, args.seed, not args.in_process),
                         args.json)


if __name__ == "__main__":
    sys.exit(main())
