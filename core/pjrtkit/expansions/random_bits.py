"""``stablehlo.rng_bit_generator`` as integer arithmetic, bit-identical to XLA's CPU backend.

XLA expands the op itself (``RngBitGeneratorExpander`` over ``xla/hlo/builder/lib/prng.cc``); this
is the same expansion in StableHLO ops (uint32/uint64 adds, multiplies, shifts, xors), so a
backend with integer arithmetic runs JAX's ``rbg``/``unsafe_rbg`` PRNGs and
``lax.rng_bit_generator``. The algorithms (the reference's ``random_bits.py`` computes the same
in NumPy):

* PHILOX (and DEFAULT, which XLA's CPU backend maps to it): state ``[key, c_lo, c_hi]`` or
  ``[key, c]`` (the counter's high word is the key; only the low word is stored back).
  Philox-4x32, 10 rounds, on ``counter + block``; the four words interleaved element-wise
  (64-bit values take two words each).
* THREE_FRY: state ``[key, counter]``. Threefry-2x32, 20 rounds, on ``counter + index``;
  64-bit values are the two words joined; narrower values split the shape in half along one
  dimension and interleave the two words' halves along it.

Values narrower than 32 bits are the low bits of 32-bit words.
"""
from __future__ import annotations

import math

import numpy as np

from pjrtkit.errors import Unimplemented
from pjrtkit.expansions.build import OpBuilder, tensor
from pjrtkit.semantics import dtypes as D
from pjrtkit.stablehlo.ir import Op

U32, U64 = D.by_name("uint32"), D.by_name("uint64")
_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = 0x1BD11BDA
_PHILOX_W32A, _PHILOX_W32B = 0x9E3779B9, 0xBB67AE85
_PHILOX_M4X32A, _PHILOX_M4X32B = 0xD2511F53, 0xCD9E8D57


class _Bits:
    """Integer helpers on one builder."""

    def __init__(self, b: OpBuilder):
        self.b = b

    def c(self, value, like):
        return self.b.constant_like(value, like)

    def lo32(self, x):
        return self.b.convert(x, U32)

    def hi32(self, x):
        return self.b.convert(self.b.shift_right_logical(x, self.c(32, x)), U32)

    def join(self, lo, hi):
        b = self.b
        hi = b.convert(hi, U64)
        return b.or_(b.convert(lo, U64), b.shift_left(hi, self.c(32, hi)))

    def rotl(self, x, r):
        b = self.b
        return b.or_(b.shift_left(x, self.c(r, x)), b.shift_right_logical(x, self.c(32 - r, x)))

    def scalar(self, state, i):
        """state[i] as a uint64 scalar."""
        return self.b.reshape(self.b.slice(state, (i,), (i + 1,)), ())

    def spread(self, scalar, shape):
        return self.b.broadcast(scalar, shape, ())


def _philox(bits: _Bits, key, x):
    b = bits.b
    k0, k1 = bits.lo32(key), bits.hi32(key)
    shape = x[0].type.shape
    for _ in range(10):
        p0 = b.multiply(b.convert(x[0], U64), bits.c(_PHILOX_M4X32A, b.convert(x[0], U64)))
        p1 = b.multiply(b.convert(x[2], U64), bits.c(_PHILOX_M4X32B, p0))
        x = [b.xor(b.xor(x[1], bits.hi32(p1)), bits.spread(k0, shape)), bits.lo32(p1),
             b.xor(b.xor(x[3], bits.hi32(p0)), bits.spread(k1, shape)), bits.lo32(p0)]
        k0 = b.add(k0, bits.c(_PHILOX_W32A, k0))
        k1 = b.add(k1, bits.c(_PHILOX_W32B, k1))
    return x


def _threefry(bits: _Bits, key, x0, x1):
    b = bits.b
    shape = x0.type.shape
    k0, k1 = bits.lo32(key), bits.hi32(key)
    schedule = (k0, k1, b.xor(b.xor(bits.c(_THREEFRY_PARITY, k0), k0), k1))
    x0 = b.add(x0, bits.spread(schedule[0], shape))
    x1 = b.add(x1, bits.spread(schedule[1], shape))
    for block in range(5):
        for rotation in _THREEFRY_ROTATIONS[block % 2]:
            x0 = b.add(x0, x1)
            x1 = b.xor(bits.rotl(x1, rotation), x0)
        x0 = b.add(x0, bits.spread(schedule[(block + 1) % 3], shape))
        inject = b.add(schedule[(block + 2) % 3], bits.c(block + 1, k0))
        x1 = b.add(x1, bits.spread(inject, shape))
    return x0, x1


def _counters(bits: _Bits, start, count: int):
    b = bits.b
    iota = b.one("stablehlo.iota", (), tensor((count,), U64), iota_dimension=0)
    return b.add(iota, bits.spread(start, (count,)))


def _narrowed(b: OpBuilder, words, dtype):
    """uint32/uint64 words as ``dtype`` (low bits for narrower types, reinterpreted sign)."""
    unsigned = np.dtype(f"u{dtype.itemsize}")
    if words.type.dtype != unsigned:
        words = b.convert(words, unsigned)
    return words if unsigned == dtype else b.bitcast(words, tensor(words.type.shape, dtype))


def _interleaved(b: OpBuilder, words, n: int, shape):
    """The words (each [blocks]) interleaved element-wise, the first ``n`` in ``shape``."""
    blocks = words[0].type.shape[0]
    columns = [b.reshape(w, (blocks, 1)) for w in words]
    flat = b.reshape(b.concatenate(columns, 1), (blocks * len(words),))
    return b.reshape(b.slice(flat, (0,), (n,)), shape)


def _philox_bits(bits: _Bits, op: Op, state, shape, dtype):
    b = bits.b
    size = op.operands[0].type.shape[0]
    if size not in (2, 3):
        raise Unimplemented(f"PHILOX with a state of {size} words (XLA defines it for 2 or 3) "
                            f"({op.describe()})")
    n = math.prod(shape)
    per_value = 2 if dtype.itemsize == 8 else 1
    blocks = -(-n * per_value // 4)
    key, low = bits.scalar(state, 0), bits.scalar(state, 1)
    high = bits.scalar(state, 2) if size == 3 else key
    lows = _counters(bits, low, max(blocks, 1))
    wrapped = b.compare(lows, bits.spread(low, (max(blocks, 1),)), "LT")
    highs = b.select(wrapped, bits.spread(b.add(high, bits.c(1, high)), (max(blocks, 1),)),
                     bits.spread(high, (max(blocks, 1),)))
    x = _philox(bits, key, [bits.lo32(lows), bits.hi32(lows), bits.lo32(highs),
                            bits.hi32(highs)])
    if per_value == 2:
        x = [bits.join(x[0], x[1]), bits.join(x[2], x[3])]
    values = _narrowed(b, _interleaved(b, x, n, shape), dtype)
    new_low = b.add(low, bits.c(blocks, low))
    carry = b.convert(b.compare(new_low, low, "LT"), U64)
    words = [key, new_low, b.add(high, carry)][:size]
    new_state = b.concatenate([b.reshape(w, (1,)) for w in words], 0)
    return new_state, values


def split_shape_into_halves(shape):
    """XLA's SplitShapeIntoHalves for Threefry's 32-bit results: (the half shape, with a
    trivial dimension after the split one; the axis the two halves are concatenated along; the
    shape rounded up to even along the split), or None for a scalar. The split is the first
    even dimension, else the largest (the first of equals)."""
    if not shape:
        return None
    even = [i for i, d in enumerate(shape) if d % 2 == 0]
    split = even[0] if even else max(range(len(shape)), key=lambda i: (shape[i], -i))
    half = list(shape)
    half[split:split + 1] = [-(-shape[split] // 2), 1]
    rounded = list(shape)
    rounded[split] = 2 * half[split]
    return tuple(half), split + 1, tuple(rounded)


def _threefry_bits(bits: _Bits, op: Op, state, shape, dtype):
    b = bits.b
    size = op.operands[0].type.shape[0]
    if size != 2:
        raise Unimplemented(f"THREE_FRY with a state of {size} words (XLA defines it for 2) "
                            f"({op.describe()})")
    key, counter = bits.scalar(state, 0), bits.scalar(state, 1)
    if dtype.itemsize == 8:
        n = math.prod(shape)
        counters = _counters(bits, counter, max(n, 1))
        x0, x1 = _threefry(bits, key, bits.lo32(counters), bits.hi32(counters))
        joined = b.slice(bits.join(x0, x1), (0,), (n,))
        values = _narrowed(b, b.reshape(joined, shape), dtype)
        used = n
    else:
        split = split_shape_into_halves(shape)
        half_shape, axis, rounded = split if split else ((1,), 0, (2,))
        used = math.prod(half_shape)
        counters = _counters(bits, counter, used)
        x0, x1 = _threefry(bits, key, bits.lo32(counters), bits.hi32(counters))
        if split is None:
            words = b.reshape(x0, ())
        else:
            both = b.concatenate([b.reshape(x0, half_shape), b.reshape(x1, half_shape)], axis)
            words = b.slice(b.reshape(both, rounded), (0,) * len(shape), shape)
        values = _narrowed(b, words, dtype)
    new_state = b.concatenate([b.reshape(key, (1,)),
                               b.reshape(b.add(counter, bits.c(used, counter)), (1,))], 0)
    return new_state, values


def rng_bit_generator(op: Op, program=None) -> list[Op]:
    algorithm = op.attributes.get("rng_algorithm", "DEFAULT")
    state_t, out_t = op.operands[0].type, op.results[1].type
    dtype = out_t.dtype
    if dtype.kind not in "iu" or dtype.itemsize not in (1, 2, 4, 8) \
            or state_t.dtype != U64 or state_t.rank != 1:
        raise Unimplemented(f"rng_bit_generator of {dtype.name} bits from a {state_t} state "
                            f"(integer bits from a uint64 vector only) ({op.describe()})")
    b = OpBuilder(op.location)
    bits = _Bits(b)
    generate = {"PHILOX": _philox_bits, "DEFAULT": _philox_bits,
                "THREE_FRY": _threefry_bits}.get(algorithm)
    if generate is None:
        raise Unimplemented(f"rng_bit_generator algorithm {algorithm} ({op.describe()})")
    new_state, values = generate(bits, op, op.operands[0], out_t.shape, dtype)
    b.emit_into("stablehlo.reshape", (new_state,), (op.results[0],))
    b.emit_into("stablehlo.reshape", (values,), (op.results[1],))
    return b.ops


EXPANSIONS = {"stablehlo.rng_bit_generator": rng_bit_generator}
