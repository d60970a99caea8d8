"""The hook implementations both GPU plugins share, as one object per plugin.

``pjrtkit-cuda`` and ``pjrtkit-rocm`` each register a ``GpuBackend(vendor=...)`` (their entry
point names it), so no hook is written twice: they differ only in the vendor driver
(``drivers.cuda`` / ``drivers.hip``), the platform name and their ``PJRTKIT_<PLUGIN>_*``
settings. The driver is chosen at the first hook that needs it: emulated under
``PJRTKIT_GPU_EMULATE=1``, else the vendor's, which raises ``FailedPrecondition`` naming why it
cannot start (the backend is then listed as unavailable by ``pjrtkit list`` and never registered
with JAX).
"""
from __future__ import annotations

import numpy as np

from pjrtkit import hookimpl
from pjrtkit.errors import InvalidArgument, Unimplemented
from pjrtkit.types import (Capabilities, CompiledProgram, DeviceSpec, MemorySpaceSpec,
                           PlatformInfo, Topology)

from pjrtkit_gpu import __version__, dtypes
from pjrtkit_gpu.device_array import is_storable
from pjrtkit_gpu.drivers import select_driver

MEMORY_KINDS = ("device", "pinned_host")


class GpuBackend:
    """The hooks of one GPU plugin. ``vendor``: ``"cuda"`` or ``"hip"``; ``plugin``: the
    plugin's short name (``cuda``, ``rocm``), which names its platform ``pjrtkit_<plugin>`` and
    its settings ``PJRTKIT_<PLUGIN>_*``; ``like``: the JAX platform whose
    ``lax.platform_dependent`` branch it takes (the plugins say None, the default branch: JAX's
    cuda/rocm branches may call XLA-only custom calls such as cuDNN's)."""

    def __init__(self, *, vendor: str, plugin: str, like: str | None, version: str):
        self.vendor = vendor
        self.plugin = plugin
        self.platform = f"pjrtkit_{plugin}"
        self.like = like
        self.version = version

    def driver(self):
        return select_driver(self.vendor)

    # -- who we are ------------------------------------------------------------------------
    @hookimpl
    def pjrtkit_platform(self):
        return PlatformInfo(name=self.platform,
                            version=f"pjrtkit-{self.plugin} {self.version} (pjrtkit-gpu "
                                    f"{__version__}{', emulated' if self._emulated() else ''})",
                            device_kind=self._device_kind(), like_platform=self.like)

    def _emulated(self) -> bool:
        from pjrtkit_gpu import settings

        return settings.emulation_requested()

    def _device_kind(self) -> str:
        try:
            return self.driver().devices()[0].name
        except Exception:  # noqa: BLE001 - the kind is only a label; topology reports failures
            return f"{self.vendor} GPU (unavailable)"

    # -- topology ---------------------------------------------------------------------------
    def _topology(self, name: str) -> Topology:
        facts = self.driver().devices()
        if not facts:
            raise Unimplemented(f"{self.platform}: the {self.vendor} driver sees no device")
        devices = tuple(
            DeviceSpec(id=i, kind=f.name, local_hardware_id=i, coords=(i, 0, 0),
                       memory_spaces=(MemorySpaceSpec("device", f.memory_bytes),
                                      MemorySpaceSpec("pinned_host")),
                       default_memory_kind="device",
                       attributes={"arch": f.arch, "core_count": f.multiprocessor_count,
                                   "warp_size": f.warp_size, "vendor": self.vendor})
            for i, f in enumerate(facts))
        return Topology(name=name, devices=devices,
                        attributes={"device_count": len(devices), "vendor": self.vendor})

    @hookimpl
    def pjrtkit_jax_lowering_rules(self):
        from pjrtkit_gpu.jax_pallas import pallas_lowering_rules

        try:
            devices = self.driver().devices()
        except Exception:  # noqa: BLE001 - no driver: no device to lower for; topology says why
            devices = ()
        # eigh, svd, ...: JAX lowers them only on its own platforms; the plugin declares a
        # primitive set, so it inherits the core's portable rules (expansions.jax_linalg),
        # which lower them to loops the expansions and the GPU rules run.
        return pallas_lowering_rules(self.vendor, devices)

    @hookimpl
    def pjrtkit_client_topology(self, options):
        return self._topology(self.plugin)

    @hookimpl
    def pjrtkit_make_topology(self, name, options):
        if name in ("", self.plugin, self.platform):
            return self._topology(name or self.plugin)
        return None

    # -- memory -----------------------------------------------------------------------------
    @hookimpl
    def pjrtkit_transfer_to_device(self, array, device, memory_kind):
        if not is_storable(array.dtype):
            raise Unimplemented(f"{self.platform}: {array.dtype.name} buffers (the GPU kernels "
                                f"take {', '.join(d.name for d in dtypes.SUPPORTED)})")
        driver = self.driver()
        payload = driver.from_host(device.local_hardware_id, array)
        driver.synchronize(device.local_hardware_id)
        return payload

    @hookimpl
    def pjrtkit_transfer_to_host(self, payload, device, memory_kind):
        return self.driver().to_host(payload)

    @hookimpl
    def pjrtkit_buffer_address(self, payload, device, memory_kind):
        return payload.pointer  # a device address (host memory when emulated)

    @hookimpl
    def pjrtkit_copy_buffer(self, payload, src_device, src_memory_kind, dst_device,
                            dst_memory_kind):
        driver = self.driver()
        copy = driver.duplicate(payload, dst_device.local_hardware_id)
        driver.synchronize(dst_device.local_hardware_id)
        return copy

    # -- compile and execute ----------------------------------------------------------------
    @hookimpl
    def pjrtkit_compile(self, program, options, devices):
        from pjrtkit.lowering.plan import build_plan
        from pjrtkit.stablehlo.cost import estimate_cost

        if options.num_partitions > 1:
            raise Unimplemented(f"{self.platform}: programs over {options.num_partitions} "
                                f"partitions (no GPU collectives yet)")
        driver = self.driver()  # first: it chooses the mode Triton is imported in
        from pjrtkit_gpu.fusion import fuse_elementwise
        from pjrtkit_gpu.lowering import registry_for

        program = fuse_elementwise(program)
        plans = {}
        for device in devices:
            index = device.local_hardware_id
            if index not in plans:
                plans[index] = build_plan(program, registry_for(driver, index, self.platform,
                                                                self.vendor))
        return CompiledProgram(executable=GpuExecutable(driver, plans),
                               cost=estimate_cost(program))

    @hookimpl
    def pjrtkit_primitive_set(self):
        """What the Triton rules implement; the core's expansions bring complex numbers,
        narrow types, fft and linear algebra down to it (none of those has a GPU rule)."""
        self.driver()  # chooses Triton's mode before the kernels are imported
        from pjrtkit_gpu.lowering import PRIMITIVES

        return PRIMITIVES

    @hookimpl
    def pjrtkit_capabilities(self):
        self.driver()  # chooses Triton's mode before the kernels are imported
        from pjrtkit_gpu.lowering import RULES

        ops = {name for name in RULES.op_names if not name.startswith("pjrtkit_gpu.")}
        return Capabilities(dtypes={d.name for d in dtypes.SUPPORTED}, ops=ops,
                            custom_call_targets=RULES.custom_call_targets,
                            features={"compile_only_topologies"}
                            | ({"multiple_devices"} if len(self.driver().devices()) > 1
                               else set()))


class GpuExecutable:
    """Plans per device (constants live on the device they were made for). ``execute`` runs
    on the core's worker thread (or inline for cheap programs) and returns once the device's
    stream is done, so the outputs' PJRT events complete when the GPU has finished."""

    __slots__ = ("driver", "plans")

    def __init__(self, driver, plans):
        self.driver = driver
        self.plans = plans

    def execute(self, arguments, devices):
        outputs = []
        for args, device in zip(arguments, devices):
            index = device.local_hardware_id
            plan = self.plans.get(index)
            if plan is None:
                raise InvalidArgument(f"executable was not compiled for device {device.id}")
            with np.errstate(all="ignore"):
                outputs.append(plan(*args))
            self.driver.synchronize(index)
        return outputs

