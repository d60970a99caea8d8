"""Reading the serialized xla::CompileOptionsProto that PJRT_Client_Compile receives.

jaxlib's own ``CompileOptions.ParseFromString`` reads the values, but it accepts garbage
silently, so the bytes are first walked as protobuf wire format here: anything that is not
well-formed protobuf is INVALID_ARGUMENT, as XLA answers.
"""
from __future__ import annotations

from pjrtkit import jax_compat
from pjrtkit.errors import InvalidArgument
from pjrtkit.types import CompileOptions


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def wire_fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of every top-level field; raises ValueError when the
    bytes are not well-formed protobuf."""
    fields = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise ValueError("field number 0")
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = int.from_bytes(data[pos:pos + 8], "little"), pos + 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = int.from_bytes(data[pos:pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire} for field {field}")
        if pos > len(data):
            raise ValueError(f"field {field} runs past the end")
        fields.append((field, wire, value))
    return fields


def read_device_assignment(proto: bytes) -> tuple[int, int, list[list[int]]]:
    """(replica_count, computation_count, device ids per computation) of a serialized
    DeviceAssignmentProto; raises ValueError when it is not well-formed protobuf."""
    replicas = computations = 0
    columns: list[list[int]] = []
    for field, wire, value in wire_fields(proto):
        if field == 1 and wire == 0:
            replicas = value
        elif field == 2 and wire == 0:
            computations = value
        elif field == 3 and wire == 2:
            ids: list[int] = []
            for f, w, v in wire_fields(value):
                if f == 1 and w == 0:
                    ids.append(v)
                elif f == 1 and w == 2:  # packed
                    pos = 0
                    while pos < len(v):
                        item, pos = _varint(v, pos)
                        ids.append(item)
            columns.append(ids)
    return replicas, computations, columns


def _device_assignment(proto: bytes) -> tuple[tuple[int, ...], ...]:
    """DeviceAssignmentProto -> [replica][computation] device ids."""
    replicas, computations, columns = read_device_assignment(proto)
    if len(columns) != computations or any(len(c) != replicas for c in columns):
        raise ValueError("device assignment shape does not match its counts")
    return tuple(tuple(columns[c][r] for c in range(computations)) for r in range(replicas))


def parse_compile_options(data: bytes) -> CompileOptions:
    from jaxlib import xla_client

    try:
        wire_fields(data)
        options = xla_client.CompileOptions.ParseFromString(data)
        build = options.executable_build_options
        assignment = None
        if build.device_assignment is not None:
            assignment = _device_assignment(build.device_assignment.serialize())
        elif options.device_assignment is not None:
            assignment = _device_assignment(options.device_assignment.serialize())
        problem = jax_compat.compile_option_overrides_problem(data)
        if problem is not None:  # an unknown or ill-typed compiler option, refused as XLA does
            raise InvalidArgument(problem)
        return CompileOptions(
            num_replicas=max(1, int(build.num_replicas or options.num_replicas or 1)),
            num_partitions=max(1, int(build.num_partitions or options.num_partitions or 1)),
            device_assignment=assignment,
            use_spmd_partitioning=bool(build.use_spmd_partitioning),
            serialized=bytes(data),
        )
    except ValueError as exc:
        raise InvalidArgument(f"compile options are not a valid serialized CompileOptionsProto "
                              f"({len(data)} bytes): {exc}") from None
