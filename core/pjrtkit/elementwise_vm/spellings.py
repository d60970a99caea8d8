"""The C spellings of the elementwise VM: every (operation, operand dtype, result dtype) it has
a loop for, with the C expression of one element.

Pure Python with no imports, on purpose: the build script (``_build.py``, run by setuptools
before anything is installed) generates the C loops from this table, and the renderer
(``program.py``) asks the same table what it may emit, so the two cannot drift. Opcodes and
dtype codes are positions in the sorted tables below.

Spellings carry no meaning of their own: each computes its operation as
``pjrtkit.semantics.scalar.SCALAR_OPS`` says (the StableHLO ops spelled whole, ``maximum``
and ``minimum``, as ``pjrtkit.semantics.definitions`` defines them). In an expression ``a``,
``b``, ``c`` are the operands' elements, ``T`` is the result's C type, ``U`` and ``S`` the
unsigned and signed types of the typed operand's width, ``BITS`` that width. Integer
arithmetic wraps: it runs on ``uint64_t`` and the result keeps its low bits (C's signed
overflow is undefined, and C promotes narrow unsigned types to int). Operations whose domain
the semantics restrict (``div_trunc``, ``rem_trunc``, shifts, a float cast to an integer)
guard it anyway and give 0 outside it: the VM evaluates both sides of every ``select``, so a
lane the select discards still runs.
"""
from __future__ import annotations

# dtype name -> (C type, unsigned C type of its width, signed C type of its width, bits)
CTYPES = {
    "bool": ("uint8_t", "uint8_t", "int8_t", 8),
    "int8": ("int8_t", "uint8_t", "int8_t", 8),
    "int16": ("int16_t", "uint16_t", "int16_t", 16),
    "int32": ("int32_t", "uint32_t", "int32_t", 32),
    "int64": ("int64_t", "uint64_t", "int64_t", 64),
    "uint8": ("uint8_t", "uint8_t", "int8_t", 8),
    "uint16": ("uint16_t", "uint16_t", "int16_t", 16),
    "uint32": ("uint32_t", "uint32_t", "int32_t", 32),
    "uint64": ("uint64_t", "uint64_t", "int64_t", 64),
    "float32": ("float", "uint32_t", "int32_t", 32),
    "float64": ("double", "uint64_t", "int64_t", 64),
}
DTYPES = tuple(sorted(CTYPES))
DTYPE_CODE = {name: code for code, name in enumerate(DTYPES)}

SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INTS = SIGNED + UNSIGNED
FLOATS = ("float32", "float64")
NUMBERS = INTS + FLOATS
ALL = ("bool",) + NUMBERS

# Limits of the integer types, for the guarded float -> integer cast.
_RANGE = {
    "int8": ("-128.0", "128.0"), "int16": ("-32768.0", "32768.0"),
    "int32": ("-2147483648.0", "2147483648.0"),
    "int64": ("-9223372036854775808.0", "9223372036854775808.0"),
    "uint8": ("-1.0", "256.0"), "uint16": ("-1.0", "65536.0"),
    "uint32": ("-1.0", "4294967296.0"), "uint64": ("-1.0", "18446744073709551616.0"),
}


# The shared float32 functions (pjrtkit.semantics.float32_functions.FUNCTIONS; a test checks).
FLOAT32_FUNCTIONS = ("exponential", "exponential_minus_one", "log", "log_plus_one", "logistic",
                     "tanh")


def _same(op: str, dtypes, expression: str, arity: int):
    return [(op, d, d, (d,) * arity, expression) for d in dtypes]


def _table() -> list[tuple[str, str, str, tuple[str, ...], str]]:
    """(operation, typed operand dtype, result dtype, operand dtypes, C expression)."""
    rows = []
    for op, sign in (("add", "+"), ("subtract", "-"), ("multiply", "*")):
        rows += _same(op, INTS, f"(T)((uint64_t)(U)a {sign} (uint64_t)(U)b)", 2)
        rows += _same(op, FLOATS, f"a {sign} b", 2)
    rows += _same("divide", FLOATS, "a / b", 2)
    rows += _same("negate", INTS, "(T)((uint64_t)0 - (uint64_t)(U)a)", 1)
    rows += _same("negate", FLOATS, "-a", 1)
    rows += _same("div_trunc", SIGNED, "(b == 0 || (b == -1 && a == (T)((U)1 << (BITS - 1))))"
                                       " ? (T)0 : (T)(a / b)", 2)
    rows += _same("div_trunc", UNSIGNED, "b == 0 ? (T)0 : (T)(a / b)", 2)
    rows += _same("rem_trunc", SIGNED, "(b == 0 || b == -1) ? (T)0 : (T)(a % b)", 2)
    rows += _same("rem_trunc", UNSIGNED, "b == 0 ? (T)0 : (T)(a % b)", 2)
    for op, sign in (("and", "&"), ("or", "|"), ("xor", "^")):
        rows += _same(op, ("bool",) + INTS, f"(T)(a {sign} b)", 2)
    rows += _same("not", ("bool",), "(T)(a ^ 1)", 1)
    rows += _same("not", INTS, "(T)~a", 1)
    rows += _same("shl", INTS, "(U)b < BITS ? (T)((uint64_t)(U)a << (U)b) : (T)0", 2)
    rows += _same("lshr", INTS, "(U)b < BITS ? (T)((U)a >> (U)b) : (T)0", 2)
    rows += _same("ashr", INTS, "(U)b < BITS ? (T)((S)a >> (U)b) : (T)((S)a < 0 ? -1 : 0)", 2)
    for direction, sign in (("EQ", "=="), ("NE", "!="), ("LT", "<"), ("LE", "<="),
                            ("GT", ">"), ("GE", ">=")):
        rows += [(f"compare_{direction}", d, "bool", (d, d), f"(uint8_t)(a {sign} b)")
                 for d in ALL]
    rows += [("select", d, d, ("bool", d, d), "a ? b : c") for d in ALL]
    # casts: every number to every number, bool to every type; a float to an integer only
    # where the truncated value is in range (outside it the semantics give no meaning: 0)
    for source in NUMBERS:
        for target in NUMBERS:
            if source == target:
                continue
            if source in FLOATS and target in INTS:
                low, high = _RANGE[target]
                expression = f"(a > {low} - 1.0 && a < {high}) ? (T)a : (T)0"
                if target in UNSIGNED:
                    expression = f"(a > -1.0 && a < {high}) ? (T)a : (T)0"
                rows.append(("cast", source, target, (source,), expression))
            else:
                rows.append(("cast", source, target, (source,), "(T)a"))
    rows += [("cast", "bool", target, ("bool",), "(T)(a != 0)") for target in NUMBERS]
    # bitcasts between types of one width: the loop is a copy (BITCAST in _build.py)
    for source in ALL:
        for target in ALL:
            if (source != target and CTYPES[source][3] == CTYPES[target][3]
                    and "bool" not in (source, target)):
                rows.append(("bitcast", source, target, (source,), "BITCAST"))
    for op, f32, f64 in (("fabs", "fabsf", "fabs"), ("floor", "floorf", "floor"),
                         ("ceil", "ceilf", "ceil"), ("trunc", "truncf", "trunc"),
                         ("rint", "rintf", "rint"), ("round", "roundf", "round"),
                         ("sqrt", "sqrtf", "sqrt")):
        rows += [(op, "float32", "float32", ("float32",), f"{f32}(a)"),
                 (op, "float64", "float64", ("float64",), f"{f64}(a)")]
    # float32 transcendentals are computed in float64 and rounded once (the renderer widens
    # them as pjrtkit.reference's NumPy renderer does), so only float64 has these
    for op in ("cbrt", "exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "atan"):
        rows.append((op, "float64", "float64", ("float64",), f"{op}(a)"))
    for op in ("atan2", "pow", "hypot"):
        rows.append((op, "float64", "float64", ("float64", "float64"), f"{op}(a, b)"))
    rows += [("fmod", "float32", "float32", ("float32", "float32"), "fmodf(a, b)"),
             ("fmod", "float64", "float64", ("float64", "float64"), "fmod(a, b)"),
             ("copysign", "float32", "float32", ("float32", "float32"), "copysignf(a, b)"),
             ("copysign", "float64", "float64", ("float64", "float64"), "copysign(a, b)")]
    rows += _same("popcount", INTS, "(T)__builtin_popcountll((uint64_t)(U)a)", 1)
    rows += _same("clz", INTS, "(U)a == 0 ? (T)BITS : "
                               "(T)(__builtin_clzll((uint64_t)(U)a) - (64 - BITS))", 1)
    # StableHLO's maximum and minimum, whole (pjrtkit.semantics.definitions.float_extremum:
    # the first NaN operand, else the larger/smaller value, a tie of zeros settled by sign)
    rows += _same("maximum", FLOATS, "a != a ? a : b != b ? b : a > b ? a : b > a ? b : "
                                     "a == 0 ? a + b : a", 2)
    rows += _same("minimum", FLOATS, "a != a ? a : b != b ? b : a > b ? b : b > a ? a : "
                                     "a == 0 ? -(-a - b) : a", 2)
    rows += _same("maximum", INTS, "a > b ? a : b", 2)
    rows += _same("minimum", INTS, "a < b ? a : b", 2)
    # a * b + c rounded once (a contracted multiply-add, see program.py)
    rows += [("multiply_add", "float32", "float32", ("float32",) * 3, "fmaf(a, b, c)"),
             ("multiply_add", "float64", "float64", ("float64",) * 3, "fma(a, b, c)")]
    # pjrtkit.semantics.float32_functions, each one C function generated from its expression
    # through the rows above (float32_source.h; program.float32_c_source)
    rows += [(f"float32_{name}", "float32", "float32", ("float32",), f"pjrtkit_f32_{name}(a)")
             for name in FLOAT32_FUNCTIONS]
    return rows


TABLE = _table()
OPS = tuple(sorted({row[0] for row in TABLE}))
OPCODE = {name: code for code, name in enumerate(OPS)}
# (operation, typed operand dtype, result dtype) -> operand dtypes
SPELLED = {(op, typed, out): operands for op, typed, out, operands, _ in TABLE}
EXPRESSION = {(op, typed, out): expression for op, typed, out, _, expression in TABLE}


def case_key(op: str, typed: str, out: str) -> int:
    """The number the C switch dispatches one instruction on."""
    n = len(DTYPES)
    return (OPCODE[op] * n + DTYPE_CODE[typed]) * n + DTYPE_CODE[out]
