"""A test-only backend that is the cpu backend except for faults put in on purpose:
its execute hook raises a plain Python exception for programs that multiply by 3.
Used to prove a Python exception inside a hook reaches JAX as INTERNAL naming the hook."""
import dataclasses

import numpy as np

from pjrtkit import hookimpl
from pjrtkit.types import PlatformInfo

import pjrtkit_cpu.plugin as cpu


@hookimpl
def pjrtkit_platform():
    return dataclasses.replace(cpu.pjrtkit_platform(), name="pjrtkit_faulty")


pjrtkit_client_topology = cpu.pjrtkit_client_topology
pjrtkit_transfer_to_device = cpu.pjrtkit_transfer_to_device
pjrtkit_transfer_to_host = cpu.pjrtkit_transfer_to_host
pjrtkit_copy_buffer = cpu.pjrtkit_copy_buffer
pjrtkit_compile = cpu.pjrtkit_compile


@hookimpl
def pjrtkit_execute(executable, arguments, devices):
    results = cpu.pjrtkit_execute(executable, arguments, devices)
    if any(np.asarray(a).dtype == np.int32 and np.asarray(a).size == 3 for a in arguments[0]):
        raise KeyError("deliberate fault in the test backend")
    return results


__all__ = ["PlatformInfo"]
