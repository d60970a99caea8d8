"""Generated Triton kernels: a fused chain of elementwise ops, a row reduction.

The source is generated at compile time from the program's ops (``lowering.elementwise_table``
gives each op's expression), written under ``PJRTKIT_CACHE_DIR/gpu-kernels`` (Triton reads a
kernel's source from its file, in both modes) and imported once per distinct source.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
from pathlib import Path

_LOCK = threading.Lock()
_LOADED: dict[str, object] = {}

HEADER = "import triton\nimport triton.language as tl\n\n\n"


def kernel_directory() -> Path:
    root = os.environ.get("PJRTKIT_CACHE_DIR") or os.path.join(Path.home(), ".cache", "pjrtkit")
    return Path(root) / "gpu-kernels"


def load_kernel(source: str, name: str):
    """The ``@triton.jit`` function ``name`` defined by ``source`` (a whole module's text)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    key = f"{name}_{digest}"
    with _LOCK:
        kernel = _LOADED.get(key)
        if kernel is not None:
            return kernel
        directory = kernel_directory()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{key}.py"
        if not path.exists() or path.read_text() != source:
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(source)
            os.replace(temporary, path)
        module_name = f"pjrtkit_gpu_generated.{key}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        kernel = getattr(module, name)
        _LOADED[key] = kernel
        return kernel


def elementwise_source(name: str, inputs: list[tuple[str, bool, str]], body: list[str],
                       outputs: list[tuple[str, str]]) -> str:
    """A kernel over ``n`` elements: ``inputs`` are (compute expression template on ``{v}``,
    is a scalar, variable or None when the body loads it) loaded as ``in<i>``; ``body``
    assigns variables; ``outputs`` are (variable, storage-type expression) stored into
    ``out<i>``."""
    params = [f"in{i}" for i in range(len(inputs))] + [f"out{i}" for i in range(len(outputs))]
    lines = [
        "@triton.jit",
        f"def {name}({', '.join(params)}, n, BLOCK: tl.constexpr):",
        "    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)",
        "    mask = i < n",
    ]
    for k, (convert, scalar, variable) in enumerate(inputs):
        if variable is None:  # read by the body itself (through a broadcast's index)
            continue
        raw = f"tl.load(in{k})" if scalar else f"tl.load(in{k} + i, mask=mask)"
        lines.append(f"    {variable} = {convert.format(v=raw)}")
    lines += [f"    {line}" for line in body]
    for k, (variable, store) in enumerate(outputs):
        lines.append(f"    tl.store(out{k} + i, {store.format(v=variable)}, mask=mask)")
    return HEADER + "\n".join(lines) + "\n"


def row_reduce_source(name: str, load: str, identity: str, combine: str, row: str, finish: str,
                      accumulator: str) -> str:
    """A kernel reducing each row of an (M, K) array into out[M]; grid (cdiv(M, BM),). The
    array is row-major, or with ``TRANSPOSED`` stored as (K, M) row-major (a reduction over
    the leading dimensions reads the operand as it lies, no transposed copy).

    ``load`` converts a loaded tile ``{v}`` to the accumulator type ``accumulator``;
    ``identity`` is the neutral element (masked lanes), ``combine`` the body on ``{a}``, ``{b}``
    (elementwise, on the per-row partial results), ``row`` reduces a tile ``{v}`` along axis 1
    (Triton's built-in ``tl.sum``/``tl.max``/``tl.min`` where one fits: Triton's interpreter
    runs a custom ``tl.reduce`` combine once per element, seconds per tile), ``finish`` folds
    the init value ``{init}`` into the
    row's result ``{v}`` and converts it to the output's storage type.
    """
    return HEADER + f"""@triton.jit
def {name}_combine(a, b):
    return {combine.format(a="a", b="b")}


@triton.jit
def {name}(x, init, out, M, K, BM: tl.constexpr, BK: tl.constexpr, TRANSPOSED: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM).to(tl.int64)
    cols = tl.arange(0, BK).to(tl.int64)
    acc = tl.full((BM,), {identity}, tl.{accumulator})
    for k0 in range(0, K, BK):
        k = k0 + cols
        mask = (rows[:, None] < M) & (k[None, :] < K)
        if TRANSPOSED:
            tile = tl.load(x + rows[:, None] + k[None, :] * M, mask=mask)
        else:
            tile = tl.load(x + rows[:, None] * K + k[None, :], mask=mask)
        tile = tl.where(mask, {load.format(v="tile")}, {identity})
        part = {row.format(v="tile", combine=f"{name}_combine")}
        # .to(): Triton widens 8- and 16-bit integer sums; a loop-carried value keeps one type
        acc = {name}_combine(acc, part).to(tl.{accumulator})
    init_value = {load.format(v="tl.load(init)")}
    tl.store(out + rows, {finish.format(v=f"{name}_combine(init_value, acc)")}, mask=rows < M)
"""


def coordinates(index: str, shape, prefix: str) -> list[str]:
    """Lines splitting the linear row-major ``index`` of ``shape`` (constants) into
    ``{prefix}0`` .. ``{prefix}{rank-1}``."""
    lines, rest = [], index
    for d in range(len(shape) - 1, 0, -1):
        lines.append(f"{prefix}{d} = {rest} % {shape[d]}")
        lines.append(f"{prefix}r{d} = {rest} // {shape[d]}")
        rest = f"{prefix}r{d}"
    if shape:
        lines.append(f"{prefix}0 = {rest}")
    return lines


def linear_kernel_source(name: str, params: list[str], body: list[str]) -> str:
    """A kernel over ``n`` elements (``i``, ``mask``) with ``params`` and ``body`` lines."""
    lines = ["@triton.jit",
             f"def {name}({', '.join(params)}, n, BLOCK: tl.constexpr):",
             "    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)",
             "    mask = i < n"]
    lines += [f"    {line}" for line in body]
    return HEADER + "\n".join(lines) + "\n"


def _indented(lines: list[str], depth: int) -> str:
    return "\n".join(" " * depth + line for line in lines)


def _captured(captures: list[str]) -> tuple[list[str], list[str]]:
    """Parameters ``cap<k>`` and the lines loading them into ``c<k>`` (see
    ``lowering.regions.captured_scalars``)."""
    return ([f"cap{k}" for k in range(len(captures))],
            [f"c{k} = {load}" for k, load in enumerate(captures)])


def _sort_operands(loads: list[str], captures: list[str], *, own: tuple[str, str, str],
                   other: tuple[str, str, str], destination: str):
    """The sort kernels' parameters (``in<k>``, ``out<k>``, captures) and lines: the captures
    and the element's own operands (``raw<k>`` as stored, ``i<k>`` in compute type) loaded at
    ``own`` = (index, mask, broadcast suffix), the compared element's ``j<k>`` at ``other``,
    and the stores of every ``raw<k>`` at ``destination`` in the row."""
    k = len(loads)
    (index, mask, shape), (other_index, other_mask, other_shape) = own, other
    capture_params, capture_lines = _captured(captures)
    params = [f"in{n}" for n in range(k)] + [f"out{n}" for n in range(k)] + capture_params
    load_own = capture_lines + [
        f"raw{n} = tl.load(in{n} + base + {index}, mask={mask}, other=0)" for n in range(k)]
    load_own += [f"i{n} = ({loads[n].format(v=f'raw{n}')}){shape}" for n in range(k)]
    probes = [f"tl.load(in{n} + base + {other_index}, mask={other_mask}, other=0)"
              for n in range(k)]
    load_other = [f"j{n} = ({loads[n].format(v=probes[n])}){other_shape}" for n in range(k)]
    stores = [f"tl.store(out{n} + base + {destination}, raw{n}, mask={mask})" for n in range(k)]
    return params, load_own, load_other, stores


def sort_rows_source(name: str, loads: list[str], before: list[str], before_result: str,
                     after: list[str], after_result: str, captures: list[str]) -> str:
    """A stable sort of each BI-element tile of each row of ``len(loads)`` row-major (R, L)
    arrays ``in<k>`` into ``out<k>`` by rank: element i goes to its tile's start plus #{j in
    the tile: j before i} + #{j < i in the tile: neither before the other}, which is the stable
    order for any strict weak order. Grid (R * NB,), NB = cdiv(L, BI) (one dimension: rows
    or tiles alone can pass a GPU's 65535 in the others); BJ divides BI. The runs it leaves
    are merged by ``merge_runs_source``.

    ``loads[k]`` converts a loaded tile ``{v}`` to operand k's compute type; ``before``
    (lines) computes ``before_result``, "element j sorts before element i", from ``j<k>`` and
    ``i<k>``; ``after`` computes ``after_result``, "i before j". BI x BJ comparisons per tile.
    ``captures``: scalars the comparator reads from outside, as ``c<k>``.
    """
    params, load_i, load_j, stores = _sort_operands(
        loads, captures, own=("i", "imask", "[:, None]"), other=("j", "jmask", "[None, :]"),
        destination="start + rank")
    return HEADER + f"""@triton.jit
def {name}({', '.join(params)}, L, NB, BI: tl.constexpr, BJ: tl.constexpr):
    program = tl.program_id(0).to(tl.int64)
    base = (program // NB) * L
    start = (program % NB) * BI
    i = start + tl.arange(0, BI).to(tl.int64)
    imask = i < L
{_indented(load_i, 4)}
    rank = tl.zeros((BI,), dtype=tl.int64)
    for j0 in range(0, BI, BJ):
        j = start + j0 + tl.arange(0, BJ).to(tl.int64)
        jmask = j < L
{_indented(load_j, 8)}
{_indented(before, 8)}
{_indented(after, 8)}
        earlier = ({before_result}) | ((j[None, :] < i[:, None]) & (({after_result}) == 0))
        earlier = earlier & jmask[None, :]
        rank += tl.sum(earlier.to(tl.int64), axis=1)
{_indented(stores, 4)}
"""


def merge_runs_source(name: str, loads: list[str], before: list[str], before_result: str,
                      after: list[str], after_result: str, captures: list[str]) -> str:
    """One pass of a stable merge sort over each row of ``len(loads)`` row-major (R, L) arrays
    ``in<k>`` whose runs of W elements are sorted: runs 2m and 2m+1 merge into ``out<k>``.
    Grid (R * NB,), NB = cdiv(L, B).

    Each element finds its place by a binary search of the other run of its pair (``STEPS``
    halvings, at least W's bit length): an element of the left run goes after the right run's
    elements that sort before it, one of the right run after the left run's elements it does
    not sort before, so equal elements keep their order. O(L log W) comparisons a pass.
    ``loads``, ``before``/``after`` and ``captures`` as in ``sort_rows_source``, on (B,) tiles.
    """
    params, load_i, load_j, stores = _sort_operands(
        loads, captures, own=("p", "pmask", ""), other=("q", "probe", ""),
        destination="destination")
    return HEADER + f"""@triton.jit
def {name}({', '.join(params)}, L, NB, W, STEPS, B: tl.constexpr):
    program = tl.program_id(0).to(tl.int64)
    base = (program // NB) * L
    p = (program % NB) * B + tl.arange(0, B).to(tl.int64)
    pmask = p < L
    pair = (p // (2 * W)) * (2 * W)
    left_end = tl.minimum(pair + W, L)
    right_end = tl.minimum(pair + 2 * W, L)
    left = p < left_end
    other = tl.where(left, left_end, pair)
    lo = tl.zeros((B,), dtype=tl.int64)
    hi = tl.where(left, right_end - left_end, left_end - pair)
{_indented(load_i, 4)}
    for _ in range(STEPS):
        probe = (lo < hi) & pmask
        mid = (lo + hi) // 2
        q = other + mid
{_indented(load_j, 8)}
{_indented(before, 8)}
{_indented(after, 8)}
        right = tl.where(left, ({before_result}) != 0, ({after_result}) == 0)
        lo = tl.where(probe & right, mid + 1, lo)
        hi = tl.where(probe & (right == 0), mid, hi)
    destination = pair + p - tl.where(left, pair, left_end) + lo
{_indented(stores, 4)}
"""


def sequential_reduce_source(name: str, loads: list[str], body: list[str], results: list[str],
                             stores: list[str], captures: list[str]) -> str:
    """A reduction of each row of ``len(loads)`` row-major (M, K) arrays ``x<k>`` (with scalar
    inits ``init<k>``) into ``out<k>[M]`` by any body: ``acc = body(acc, column)`` for each
    column in order, as XLA's CPU backend folds; rows in parallel. Grid (cdiv(M, BM),).

    ``loads[k]`` converts ``{v}`` to operand k's compute type; ``body`` (lines) computes
    ``results`` from ``acc<k>`` and ``x<k>v``; ``stores[k]`` converts ``{v}`` to storage.
    ``captures``: scalars the body reads from outside, as ``c<k>``.
    """
    n = len(loads)
    capture_params, capture_lines = _captured(captures)
    params = [f"x{k}" for k in range(n)] + [f"init{k}" for k in range(n)] + \
        [f"out{k}" for k in range(n)] + capture_params
    start = [f"acc{k} = tl.where(mask, {loads[k].format(v=f'tl.load(init{k})')}, "
             f"{loads[k].format(v=f'tl.load(init{k})')})" for k in range(n)]
    step = [f"x{k}v = {loads[k].format(v=f'tl.load(x{k} + rows * K + c, mask=mask, other=0)')}"
            for k in range(n)]
    step += body
    step += [f"acc{k} = {results[k]}" for k in range(n)]
    finish = [f"tl.store(out{k} + rows, {stores[k].format(v=f'acc{k}')}, mask=mask)"
              for k in range(n)]
    return HEADER + f"""@triton.jit
def {name}({', '.join(params)}, M, K, BM: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM).to(tl.int64)
    mask = rows < M
{_indented(capture_lines + start, 4)}
    for c in range(0, K):
{_indented(step, 8)}
{_indented(finish, 4)}
"""
