"""The child side of ``pjrtkit.stablehlo.isolation``: parse programs sent on stdin (or partition
them with XLA first: ``PartitionRequest``; or print other MLIR bytecode as text:
``BytecodeTextRequest``; or set module attributes: ``ModuleAttributesRequest``), send each
answer (or the error) back pickled on the original stdout. Run as
``python -m pjrtkit.stablehlo.parser_child``; it exits when its stdin closes."""
from __future__ import annotations

import os
import pickle
import signal
import sys
import threading

from pjrtkit.stablehlo.isolation import (BytecodeTextRequest, ModuleAttributesRequest,
                                         PartitionRequest, WarmPartitionerRequest, error_reply,
                                         read_message, write_message)
from pjrtkit.stablehlo.loader import parse_program, warm_up
from pjrtkit.stablehlo.mlir_text import bytecode_text, with_module_attributes
from pjrtkit.stablehlo.partition import partition_and_parse


def answer(request):
    """A Program for program bytes or text; (Program, bytecode) for a PartitionRequest; text
    for a BytecodeTextRequest."""
    if isinstance(request, BytecodeTextRequest):
        return bytecode_text(request.bytecode, request.dialect_module)
    if isinstance(request, ModuleAttributesRequest):
        return with_module_attributes(request.code, dict(request.attributes))
    if isinstance(request, WarmPartitionerRequest):
        threading.Thread(target=_warm_partitioner, args=(request.num_devices,), daemon=True,
                         name="pjrtkit-warm-partitioner").start()
        return None
    if isinstance(request, PartitionRequest):
        return partition_and_parse(request.code, request.compile_options,
                                   num_replicas=request.num_replicas,
                                   num_partitions=request.num_partitions)
    return parse_program(request)


def _warm_partitioner(num_devices: int) -> None:
    from pjrtkit import jax_compat

    try:
        jax_compat.private_xla_cpu_client(num_devices)
    except Exception:  # noqa: BLE001 - the first partition reports whatever this would have
        pass


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the child stops
    requests = sys.stdin.buffer
    # Replies go to a private copy of stdout; anything printed (by jaxlib or us) goes to stderr.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    # The parent starts the child when it creates a client (isolation.start_parser): the
    # imports happen while the user's program gets to its first compile.
    try:
        warm_up()
    except Exception:  # noqa: BLE001 - the first parse reports whatever this would have
        pass
    while True:
        request = read_message(requests)
        if request is None:
            return
        try:
            reply = ("ok", answer(pickle.loads(request)))
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the parent
            reply = error_reply(exc)
        write_message(replies, pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":
    main()
