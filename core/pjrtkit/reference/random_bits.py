"""stablehlo.rng_bit_generator, bit-identical to XLA's CPU backend.

XLA expands the op (``RngBitGeneratorExpander`` over ``xla/hlo/builder/lib/prng.cc``); this
module reproduces those expansions with vectorised NumPy uint32/uint64 arithmetic:

* THREE_FRY: state ``[key, counter]``. Threefry-2x32 (20 rounds) on the 64-bit inputs
  ``counter + linear index``. 32-bit (and narrower) results take both output words: the shape
  is split in half along one dimension and the halves interleaved along it. The counter
  advances by the number of Threefry blocks used.
* PHILOX (and DEFAULT, which XLA's CPU backend maps to PHILOX): state ``[key, c_lo, c_hi]``
  (a 128-bit counter) or ``[key, c]`` (counter low word ``c``, high word ``key``; only the low
  word is stored back). Philox-4x32 (10 rounds) on ``counter + block index``; the four output
  words are interleaved element-wise.

Narrow results are the low bits of 32-bit results, as in XLA.
"""
from __future__ import annotations

import math

import numpy as np

from pjrtkit.expansions.random_bits import split_shape_into_halves
from pjrtkit.reference.registry import REFERENCE

_U32 = np.dtype(np.uint32)
_U64 = np.dtype(np.uint64)
_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF

_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = 0x1BD11BDA
_PHILOX_W32A, _PHILOX_W32B = 0x9E3779B9, 0xBB67AE85
_PHILOX_M4X32A, _PHILOX_M4X32B = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)


# -- block ciphers ----------------------------------------------------------------------------
def _threefry2x32(key0: int, key1: int, x0: np.ndarray, x1: np.ndarray):
    """Threefry-2x32, 20 rounds, on uint32 arrays (modified in place and returned)."""
    schedule = (key0, key1, _THREEFRY_PARITY ^ key0 ^ key1)
    x0 += np.uint32(schedule[0])
    x1 += np.uint32(schedule[1])
    scratch = np.empty_like(x1)
    for block in range(5):
        for rotation in _THREEFRY_ROTATIONS[block % 2]:
            x0 += x1
            np.left_shift(x1, np.uint32(rotation), out=scratch)
            x1 >>= np.uint32(32 - rotation)
            x1 |= scratch
            x1 ^= x0
        x0 += np.uint32(schedule[(block + 1) % 3])
        x1 += np.uint32((schedule[(block + 2) % 3] + block + 1) & _MASK32)
    return x0, x1


def _philox4x32(key0: int, key1: int, x: list[np.ndarray]) -> list[np.ndarray]:
    """Philox-4x32, 10 rounds, on four uint32 arrays (reused as buffers)."""
    x0, x1, x2, x3 = x
    product0, product1, high = (np.empty(x0.shape, _U64) for _ in range(3))
    shift = np.uint64(32)
    for _ in range(10):
        np.multiply(x0, _PHILOX_M4X32A, out=product0, dtype=_U64)
        np.multiply(x2, _PHILOX_M4X32B, out=product1, dtype=_U64)
        # The round maps (x0, x1, x2, x3) to (hi(x2*B) ^ x1 ^ k0, lo(x2*B), hi(x0*A) ^ x3 ^ k1,
        # lo(x0*A)); computed into the buffers of x1, x2, x3, x0 and renamed.
        np.right_shift(product1, shift, out=high)
        np.bitwise_xor(x1, high, out=x1, casting="unsafe")
        x1 ^= np.uint32(key0)
        np.copyto(x2, product1, casting="unsafe")
        np.right_shift(product0, shift, out=high)
        np.bitwise_xor(x3, high, out=x3, casting="unsafe")
        x3 ^= np.uint32(key1)
        np.copyto(x0, product0, casting="unsafe")
        x0, x1, x2, x3 = x1, x2, x3, x0
        key0 = (key0 + _PHILOX_W32A) & _MASK32
        key1 = (key1 + _PHILOX_W32B) & _MASK32
    return [x0, x1, x2, x3]


def _split64(values: np.ndarray):
    return values.astype(_U32), (values >> np.uint64(32)).astype(_U32)


def _join32(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    return low.astype(_U64) | (high.astype(_U64) << np.uint64(32))


def _counters(start: int, count: int) -> np.ndarray:
    """uint64 ``start + [0, count)`` with wraparound."""
    return np.arange(count, dtype=_U64) + np.uint64(start)


# -- THREE_FRY --------------------------------------------------------------------------------
def _threefry_kernel(shape, dtype):
    n = math.prod(shape)
    if dtype.itemsize == 8:
        def generate(key, counter):
            x0, x1 = _threefry2x32(key & _MASK32, key >> 32, *_split64(_counters(counter, n)))
            return _join32(x0, x1).view(dtype).reshape(shape), counter + n

        return generate

    split = split_shape_into_halves(shape)
    half_shape, concat_axis, rounded = split if split else ((1,), 0, (2,))
    n_half = math.prod(half_shape)
    crop = tuple(slice(0, d) for d in shape)

    def generate(key, counter):
        x0, x1 = _threefry2x32(key & _MASK32, key >> 32,
                               *_split64(_counters(counter, n_half)))
        if split is None:
            bits = x0.reshape(())
        else:
            bits = np.concatenate([x0.reshape(half_shape), x1.reshape(half_shape)],
                                  axis=concat_axis).reshape(rounded)[crop]
        return _narrow(bits, dtype), counter + n_half

    return generate


# -- PHILOX -----------------------------------------------------------------------------------
def _philox_kernel(shape, dtype):
    n = math.prod(shape)
    words_per_value = 2 if dtype.itemsize == 8 else 1
    blocks = -(-n * words_per_value // 4)

    def generate(key, counter):
        low, high = counter & _MASK64, counter >> 64
        lows = _counters(low, blocks)
        highs = np.where(lows < np.uint64(low), np.uint64((high + 1) & _MASK64),
                         np.uint64(high))
        words = _philox4x32(key & _MASK32, key >> 32, [*_split64(lows), *_split64(highs)])
        if words_per_value == 2:
            words = [_join32(words[0], words[1]), _join32(words[2], words[3])]
        bits = np.stack(words, axis=1).reshape(-1)[:n].reshape(shape)
        return _narrow(bits, dtype), (counter + blocks) & (2 ** 128 - 1)

    return generate


def _narrow(bits: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Keep the low bits of 32-bit words for 8/16-bit results; reinterpret signedness."""
    if dtype.itemsize < bits.dtype.itemsize:
        bits = bits.astype(np.dtype(f"u{dtype.itemsize}"))
    return bits.view(dtype)


# -- the op -----------------------------------------------------------------------------------
@REFERENCE.register("stablehlo.rng_bit_generator")
def rng_bit_generator(op, ctx):
    algorithm = op.attributes.get("rng_algorithm", "DEFAULT")
    state_t = op.operands[0].type
    out_t = op.results[1].type
    dtype = out_t.dtype
    if dtype.kind not in "iu" or dtype.itemsize not in (1, 2, 4, 8):
        raise ctx.unimplemented(op, f"random bits of dtype {dtype.name} (integer outputs only)")
    if state_t.dtype != _U64 or state_t.rank != 1:
        raise ctx.unimplemented(op, f"state of type {state_t} (expected a uint64 vector)")
    state_size = state_t.shape[0]

    if algorithm == "THREE_FRY":
        if state_size != 2:
            raise ctx.unimplemented(op, f"THREE_FRY with a state of {state_size} words "
                                        f"(XLA defines it for 2)")
        generate = _threefry_kernel(out_t.shape, dtype)

        def kernel(state):
            key, counter = int(state[0]), int(state[1])
            bits, counter = generate(key, counter)
            return np.array([key, counter & _MASK64], dtype=_U64), bits

        return kernel

    if algorithm in ("PHILOX", "DEFAULT"):
        if state_size not in (2, 3):
            raise ctx.unimplemented(op, f"PHILOX with a state of {state_size} words "
                                        f"(XLA defines it for 2 or 3)")
        generate = _philox_kernel(out_t.shape, dtype)
        wide_counter = state_size == 3

        def kernel(state):
            key = int(state[0])
            # A 2-word state uses the key as the counter's high word and stores back only the
            # low word.
            high = int(state[2]) if wide_counter else key
            bits, counter = generate(key, int(state[1]) | (high << 64))
            new_state = [key, counter & _MASK64, counter >> 64][:state_size]
            return np.array(new_state, dtype=_U64), bits

        return kernel

    raise ctx.unimplemented(op, f"rng_algorithm {algorithm}")
