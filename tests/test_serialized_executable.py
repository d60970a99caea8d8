"""Serialized executables (PJRT_Executable_Serialize / DeserializeAndLoad) are untrusted input:
a versioned, checksummed container of data only (runtime/serialized_executable.py). Every
flipped byte is INVALID_ARGUMENT; crafted blobs with valid checksums and hostile contents are
rejected without anything in them running. The round trip through JAX in a new process is
tests/jax/test_serialized_executable_through_jax.py."""
from __future__ import annotations

import hashlib
import os
import pickle
import struct

import numpy as np
import pytest

from pjrtkit.backend import Backend
from pjrtkit.errors import ErrorCode, PjrtError
from pjrtkit.runtime import serialized_executable as fmt
from pjrtkit.runtime.client import Client
from pjrtkit.testing.programs import portable_artifact

PLATFORM = "pjrtkit_template"


def _add_one(x):
    return x + 1.0


@pytest.fixture(scope="module")
def client():
    import template_backend

    client = Client(Backend("template", template_backend, "test"), {})
    yield client
    client.destroy()


@pytest.fixture(scope="module")
def compile_options():
    from jaxlib import xla_client

    options = xla_client.CompileOptions()
    options.num_replicas = options.num_partitions = 1
    return options.SerializeAsString()


@pytest.fixture(scope="module")
def blob(client, compile_options):
    code = portable_artifact(_add_one, np.zeros(3, np.float32))
    return client.compile(code, "mlir", compile_options).executable.serialize()


def _run(client, loaded) -> list:
    arg = client.buffer_from_host(np.arange(3, dtype=np.float32), device=client.devices[0])
    outputs, _events = loaded.execute([[arg]])
    out = np.zeros(3, np.float32)
    outputs[0][0].to_host(out).wait()
    return out.tolist()


def _rejected(client, data: bytes) -> str:
    with pytest.raises(PjrtError) as info:
        client.deserialize_executable(data)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT, info.value
    return str(info.value)


def _with_checksum(payload: bytes, version: int = fmt.FORMAT_VERSION) -> bytes:
    """A blob whose header is valid for ``payload``: what anyone can forge."""
    return (struct.pack("<8sIQ32s", fmt.MAGIC, version, len(payload),
                        hashlib.sha256(payload).digest()) + payload)


def _sections(*pairs: tuple[bytes, bytes]) -> bytes:
    return b"".join(struct.pack("<4sQ", tag, len(value)) + value for tag, value in pairs)


def test_the_round_trip_loads_and_runs(client, blob):
    assert blob.startswith(fmt.MAGIC)
    assert _run(client, client.deserialize_executable(blob)) == [1.0, 2.0, 3.0]


def test_the_layout_is_the_documented_one(blob):
    magic, version, length, digest = struct.unpack_from("<8sIQ32s", blob)
    assert (magic, version, length) == (b"PJRTKEXE", 1, len(blob) - 52)
    assert hashlib.sha256(blob[52:]).digest() == digest
    program, options, fingerprint = fmt.unpack(blob, PLATFORM)
    assert fmt.pack(PLATFORM, program, options, fingerprint) == blob


def test_every_flipped_byte_is_invalid_argument(blob):
    for position in range(len(blob)):
        for bit in (0x01, 0x80):
            damaged = bytearray(blob)
            damaged[position] ^= bit
            with pytest.raises(PjrtError) as info:
                fmt.unpack(bytes(damaged), PLATFORM)
            assert info.value.code == ErrorCode.INVALID_ARGUMENT, (position, bit)


def test_flipped_bytes_are_rejected_by_the_client(client, blob):
    # Through Client.deserialize_executable (what PJRT_Executable_DeserializeAndLoad calls):
    # one flip in each region (header, each section's tag, length and contents).
    for position in (0, 9, 13, 30, 52, 56, 70, len(blob) // 2, len(blob) - 1):
        damaged = bytearray(blob)
        damaged[position] ^= 0x10
        assert "rejected" in _rejected(client, bytes(damaged))


@pytest.mark.parametrize("length", [0, 1, 8, 51, 52, 60])
def test_truncated_blobs_are_invalid_argument(client, blob, length):
    _rejected(client, blob[:length])


def test_trailing_bytes_and_an_old_or_new_version_are_rejected(client, blob):
    assert "payload bytes" in _rejected(client, blob + b"\0")
    payload = blob[52:]
    assert "format version 2" in _rejected(client, _with_checksum(payload, version=2))
    assert "does not start with" in _rejected(client, b"PJRTKIT-EXE1" + blob)


class _CreatesAFile:
    """Unpickling this creates the file: the proof that nothing unpickles a section."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_hostile_blob_with_a_valid_checksum_runs_nothing(client, blob, tmp_path):
    program, options, fingerprint = fmt.unpack(blob, PLATFORM)
    marker = tmp_path / "created-by-unpickling"
    evil = pickle.dumps(_CreatesAFile(str(marker)))
    assert not marker.exists()
    forged = [
        # The pickle where the program, the options, the platform or the fingerprint go.
        fmt.pack(PLATFORM, evil, options, fingerprint),
        fmt.pack(PLATFORM, program, evil, fingerprint),
        _with_checksum(_sections((b"PLAT", evil), (b"PROG", program), (b"OPTS", options),
                                 (b"FING", fingerprint.encode()))),
        _with_checksum(_sections((b"PLAT", PLATFORM.encode()), (b"PROG", program),
                                 (b"OPTS", options), (b"FING", evil))),
        # Python source, and a marshalled code object, where the program goes.
        fmt.pack(PLATFORM, f"open({str(marker)!r}, 'w')".encode(), options, fingerprint),
        fmt.pack(PLATFORM, __import__("marshal").dumps(compile(
            f"open({str(marker)!r}, 'w')", "<evil>", "exec")), options, fingerprint),
        # An extra section, sections out of order, a section longer than the payload.
        _with_checksum(fmt.pack(PLATFORM, program, options, fingerprint)[52:]
                       + _sections((b"CODE", evil))),
        _with_checksum(_sections((b"PROG", program), (b"PLAT", PLATFORM.encode()),
                                 (b"OPTS", options), (b"FING", fingerprint.encode()))),
        _with_checksum(struct.pack("<4sQ", b"PLAT", 1 << 62) + PLATFORM.encode()),
    ]
    for data in forged:
        _rejected(client, data)
    assert not marker.exists()
    assert not os.listdir(tmp_path)


def test_a_valid_program_with_a_forged_fingerprint_is_rejected(client, blob):
    program, options, _fingerprint = fmt.unpack(blob, PLATFORM)
    assert "fingerprint" in _rejected(client, fmt.pack(PLATFORM, program, options, "0" * 64))


def test_a_blob_for_another_platform_is_rejected(client, blob):
    program, options, fingerprint = fmt.unpack(blob, PLATFORM)
    assert "pjrtkit_other" in _rejected(client, fmt.pack("pjrtkit_other", program, options,
                                                          fingerprint))


def test_the_load_path_has_no_pickle_marshal_or_eval():
    # What loading runs on the blob: this module and Client.deserialize_executable; the
    # program goes to the parser child as bytes (isolation.py pickles only what it sends).
    import inspect

    source = inspect.getsource(fmt) + inspect.getsource(Client.deserialize_executable)
    for forbidden in ("pickle", "marshal", "eval(", "exec(", "importlib", "__import__"):
        assert forbidden not in source.replace("no pickle, marshal or eval", ""), forbidden
