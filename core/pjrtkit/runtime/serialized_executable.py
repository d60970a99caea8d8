"""The bytes of PJRT_Executable_Serialize and PJRT_Executable_DeserializeAndLoad: a versioned,
integrity-checked container of data only (ARCHITECTURE.md, "Serialized executables").

Layout, all integers little-endian::

    magic      8 bytes   b"PJRTKEXE"
    version    u32       FORMAT_VERSION (1)
    length     u64       bytes of the payload that follows; nothing may follow the payload
    sha256     32 bytes  SHA-256 of the payload
    payload    sections, each: tag (4 ASCII bytes), u64 length, that many bytes;
               exactly SECTIONS, each once, in that order

The sections are the platform name (UTF-8), the StableHLO portable artifact as Compile received
it, the serialized CompileOptionsProto and the executable's fingerprint (64 hex digits). No
kernel or generated code is stored: loading compiles the program again (in the parser child
process, like any compile), so loading runs nothing from the blob. The checksum catches damage,
not an attacker (anyone can recompute it); what makes a hostile blob harmless is that every
section is read as data only (no pickle, marshal or eval anywhere on this path) and each is
checked before use. Any failure is INVALID_ARGUMENT saying what is wrong.
"""
from __future__ import annotations

import hashlib
import re
import struct

from pjrtkit.errors import InvalidArgument

MAGIC = b"PJRTKEXE"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIQ32s")
_SECTION = struct.Struct("<4sQ")
SECTIONS = (b"PLAT", b"PROG", b"OPTS", b"FING")
_FINGERPRINT = re.compile(rb"^[0-9a-f]{64}$")


def pack(platform_name: str, program: bytes, compile_options: bytes, fingerprint: str) -> bytes:
    """The serialized executable of ``program`` compiled with ``compile_options``."""
    values = (platform_name.encode("utf-8"), bytes(program), bytes(compile_options),
              fingerprint.encode("ascii"))
    payload = b"".join(_SECTION.pack(tag, len(value)) + value
                       for tag, value in zip(SECTIONS, values))
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(payload),
                        hashlib.sha256(payload).digest()) + payload


def unpack(data: bytes, platform_name: str) -> tuple[bytes, bytes, str]:
    """(program, compile options, fingerprint) of a serialized executable for
    ``platform_name``; InvalidArgument for anything else."""
    data = bytes(data)
    if len(data) < _HEADER.size:
        raise _malformed(data, f"shorter than its {_HEADER.size}-byte header")
    magic, version, length, digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise _malformed(data, f"it does not start with {MAGIC!r} (not a pjrtkit executable, "
                               f"or from a pjrtkit before format version 1)")
    if version != FORMAT_VERSION:
        raise _malformed(data, f"format version {version}; this pjrtkit reads version "
                               f"{FORMAT_VERSION} (serialize it again with this pjrtkit)")
    payload = data[_HEADER.size:]
    if length != len(payload):
        raise _malformed(data, f"the header announces {length} payload bytes, "
                               f"{len(payload)} follow")
    if hashlib.sha256(payload).digest() != digest:
        raise _malformed(data, "the SHA-256 checksum of its payload does not match (damaged)")
    values = _sections(payload, data)
    try:
        platform = values[b"PLAT"].decode("utf-8")
    except UnicodeDecodeError:
        raise _malformed(data, "its platform name is not UTF-8") from None
    if platform != platform_name:
        raise InvalidArgument(f"serialized executable was compiled for {platform!r}, not "
                              f"{platform_name!r}")
    if not _FINGERPRINT.match(values[b"FING"]):
        raise _malformed(data, "its fingerprint is not 64 hex digits")
    return values[b"PROG"], values[b"OPTS"], values[b"FING"].decode("ascii")


def check_fingerprint(expected: str, actual: str, data: bytes) -> None:
    """The executable compiled from the blob's sections must be the one that was serialized."""
    if expected != actual:
        raise _malformed(data, f"its fingerprint {expected[:16]}... does not match the program "
                               f"and options it carries ({actual[:16]}...)")


def _sections(payload: bytes, data: bytes) -> dict[bytes, bytes]:
    values = {}
    pos = 0
    for tag in SECTIONS:
        if pos + _SECTION.size > len(payload):
            raise _malformed(data, f"section {tag.decode()} is missing")
        found, size = _SECTION.unpack_from(payload, pos)
        if found != tag:
            raise _malformed(data, f"expected section {tag.decode()} at payload byte {pos}, "
                                   f"found tag {found!r}")
        pos += _SECTION.size
        if size > len(payload) - pos:
            raise _malformed(data, f"section {tag.decode()} announces {size} bytes, "
                                   f"{len(payload) - pos} remain")
        values[tag] = payload[pos:pos + size]
        pos += size
    if pos != len(payload):
        raise _malformed(data, f"{len(payload) - pos} unexpected bytes after the last section")
    return values


def _malformed(data: bytes, why: str) -> InvalidArgument:
    return InvalidArgument(f"serialized executable ({len(data)} bytes) is rejected: {why}")
