"""A test-only backend that is the cpu backend except for one fault put in on purpose: its
executable raises a plain Python exception for programs given an int32 array of 3 elements.
Used to prove a Python exception inside a plugin's execute reaches JAX as INTERNAL naming the
executable, and that the process lives on."""
import dataclasses

import numpy as np

import pjrtkit_cpu.plugin as cpu
from pjrtkit import hookimpl


@hookimpl
def pjrtkit_platform():
    return dataclasses.replace(cpu.pjrtkit_platform(), name="pjrtkit_faulty")


pjrtkit_client_topology = cpu.pjrtkit_client_topology
pjrtkit_transfer_to_device = cpu.pjrtkit_transfer_to_device
pjrtkit_transfer_to_host = cpu.pjrtkit_transfer_to_host
pjrtkit_copy_buffer = cpu.pjrtkit_copy_buffer


class FaultyExecutable:
    def __init__(self, inner):
        self.inner = inner

    def execute(self, arguments, devices):
        results = self.inner.execute(arguments, devices)
        if any(np.asarray(a).dtype == np.int32 and np.asarray(a).size == 3
               for a in arguments[0]):
            raise KeyError("deliberate fault in the test backend")
        return results


@hookimpl
def pjrtkit_compile(program, options, devices):
    compiled = cpu.pjrtkit_compile(program, options, devices)
    return dataclasses.replace(compiled, executable=FaultyExecutable(compiled.executable))
