"""A record of the distinct kernels a process launches, for precompiling them elsewhere.

With ``PJRTKIT_GPU_KERNEL_LOG=DIR`` every process appends one JSON line per distinct kernel
(kernel function, signature, constexprs, Triton options) to ``DIR/kernels-<pid>.jsonl``: under
emulation at its first launch (``record``), on a GPU at its first compile (``compiling``, which
adds the target, the compile's seconds and whether Triton's cache answered it). A generated
kernel (``codegen.load_kernel``) carries its module's source, so another process can rebuild
it; the lowering's own kernels name their module. ``pjrtkit_gpu.precompile`` reads the lines.
Without the variable nothing is recorded and nothing is imported.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

VARIABLE = "PJRTKIT_GPU_KERNEL_LOG"
GENERATED_PREFIX = "pjrtkit_gpu_generated."

_lock = threading.Lock()
_seen: set = set()
_hits = threading.local()
_listening: list[bool] = []


def directory() -> Path | None:
    named = os.environ.get(VARIABLE, "").strip()
    return Path(named) if named else None


def describe(kernel, signature: Mapping[str, str], constexprs: Mapping[str, Any],
             options: Mapping[str, int] | None) -> dict[str, Any]:
    """The JSON record of one kernel (without what only a compile knows)."""
    function = getattr(kernel, "fn", None)
    if function is None:  # a Pallas kernel (triton_ir.TritonIrKernel): Triton IR, no Python
        return {"pallas": getattr(kernel, "name", type(kernel).__name__),
                "key": getattr(kernel, "key", None)}
    module = function.__module__
    record = {"module": module, "name": function.__name__, "signature": dict(signature),
              "constexprs": dict(constexprs), "options": dict(options or {})}
    if module.startswith(GENERATED_PREFIX):
        record["source"] = Path(sys.modules[module].__file__).read_text()
    return record


def _identity(record: Mapping[str, Any]) -> str:
    fields = {k: v for k, v in record.items() if k not in ("seconds", "cache_hit", "error")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _write(record: dict[str, Any]) -> None:
    folder = directory()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"kernels-{os.getpid()}.jsonl", "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


def enabled() -> bool:
    return directory() is not None


def record(kernel, signature: Mapping[str, str], constexprs: Mapping[str, Any],
           options: Mapping[str, int] | None) -> None:
    """Note an emulated launch's kernel once per process (``signature``: Triton's, as
    ``compiled_kernels.signature_of`` gives it)."""
    if directory() is None:
        return
    entry = describe(kernel, signature, constexprs, options)
    identity = _identity(entry)
    with _lock:
        if identity in _seen:
            return
        _seen.add(identity)
        _write(entry)


def _listen() -> None:
    """Make Triton say whether its cache answered each compile (its compilation listener)."""
    if _listening:
        return
    _listening.append(True)
    import triton

    compilation = getattr(getattr(triton, "knobs", None), "compilation", None)
    if compilation is None or not hasattr(compilation, "listener"):
        return
    previous = compilation.listener

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        _hits.cache_hit = bool(cache_hit)
        if previous is not None:
            previous(src=src, metadata=metadata, metadata_group=metadata_group, times=times,
                     cache_hit=cache_hit)

    compilation.listener = listener


@contextlib.contextmanager
def compiling(kernel, signature: Mapping[str, str], constexprs: Mapping[str, Any],
              options: Mapping[str, int] | None, target: str):
    """Around a compile for a GPU: with the log on, one line with the target, the seconds and
    whether Triton's cache answered it (None when this Triton does not say)."""
    if directory() is None:
        yield
        return
    _listen()
    _hits.cache_hit = None
    start = time.perf_counter()
    error = None
    try:
        yield
    except Exception as exc:
        error = f"{type(exc).__name__}: {str(exc)[:500]}"
        raise
    finally:
        entry = describe(kernel, signature, constexprs, options)
        entry.pop("source", None)
        entry.update(target=target, seconds=round(time.perf_counter() - start, 4),
                     cache_hit=_hits.cache_hit, error=error)
        with _lock:
            _write(entry)


def read(folder: Path) -> list[dict[str, Any]]:
    """Every record of every process in ``folder``, distinct, in the order first seen."""
    records, seen = [], set()
    for path in sorted(Path(folder).glob("kernels-*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            identity = _identity(entry)
            if identity not in seen:
                seen.add(identity)
                records.append(entry)
    return records
