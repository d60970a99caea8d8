"""The one typed facade through which the core calls a backend's hooks.

One ``Backend`` per loaded backend: its own pluggy PluginManager holding the built-in plugin
and the backend's hook module, checked against the contract when it loads
(``pjrtkit.contract``). Every call goes through ``_call``, which turns a non-PJRT exception into
INTERNAL naming the hook and the backend, and a missing mandatory answer into UNIMPLEMENTED
naming the hook.

Executions do not go through here: ``pjrtkit_compile`` returns an executable object whose
``execute`` the runtime calls directly (``pjrtkit.runtime.executable``).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pluggy

from pjrtkit import builtin, hookspecs
from pjrtkit._markers import PROJECT
from pjrtkit.contract import register_checked
from pjrtkit.errors import (Internal, InvalidArgument, PjrtError, Unimplemented,
                            host_out_of_memory)
from pjrtkit.types import (Capabilities, CompiledProgram, CompileOptions, DeviceSpec,
                           JaxLoweringRule, MemoryStats, MultiProcessSupport, PlatformInfo,
                           PrimitiveSet, Topology)

log = logging.getLogger(__name__)


class Backend:
    """A backend as the core sees it: ``name`` (``"cpu"``), ``platform_name``
    (``"pjrtkit_cpu"``), ``version``, and one method per hook."""

    def __init__(self, name: str, plugin: object, version: str = "unknown"):
        self.name = name
        self.version = version
        self._pm = pluggy.PluginManager(PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._pm.register(builtin, "pjrtkit.builtin")
        register_checked(self._pm, plugin, f"pjrtkit.backends.{name}", name)
        self._primitive_set: PrimitiveSet | None | object = _UNASKED
        self.platform_name = f"pjrtkit_{name}"  # until the plugin names itself, for messages
        self.platform: PlatformInfo = self._call("pjrtkit_platform")
        self.platform_name = self.platform.name

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        """The backend's pluggy manager (the conformance suite calls hooks raw through it)."""
        return self._pm

    def _call(self, hook_name: str, **kwargs) -> Any:
        hook = getattr(self._pm.hook, hook_name)
        try:
            result = hook(**kwargs)
        except PjrtError:
            raise
        except MemoryError as exc:
            raise host_out_of_memory(exc, f"{self.platform_name}: hook {hook_name}") from exc
        except Exception as exc:
            raise Internal(f"{self.platform_name}: hook {hook_name} raised "
                           f"{type(exc).__name__}: {exc}") from exc
        if result is None and hook_name not in _OPTIONAL_ANSWERS:
            raise Unimplemented(f"{self.platform_name}: no plugin implements {hook_name}")
        return result

    # -- topology ----------------------------------------------------------------------------
    def client_topology(self, *, options: Mapping[str, Any]) -> Topology:
        return self._call("pjrtkit_client_topology", options=dict(options))

    def make_topology(self, *, name: str, options: Mapping[str, Any]) -> Topology:
        topology = self._call("pjrtkit_make_topology", name=name, options=dict(options))
        if topology is None:
            raise InvalidArgument(f"{self.platform_name}: unknown topology name {name!r}")
        return topology

    def multi_process(self) -> MultiProcessSupport | None:
        answer = self._call("pjrtkit_multi_process")
        if answer is not None and not isinstance(answer, MultiProcessSupport):
            raise Internal(f"{self.platform_name}: pjrtkit_multi_process returned "
                           f"{type(answer).__name__}, expected MultiProcessSupport or None")
        return answer

    # -- memory ------------------------------------------------------------------------------
    def transfer_to_device(self, *, array, device: DeviceSpec, memory_kind: str) -> Any:
        return self._call("pjrtkit_transfer_to_device", array=array, device=device,
                          memory_kind=memory_kind)

    def transfer_to_host(self, *, payload, device: DeviceSpec, memory_kind: str):
        return self._call("pjrtkit_transfer_to_host", payload=payload, device=device,
                          memory_kind=memory_kind)

    def copy_buffer(self, *, payload, src_device: DeviceSpec, src_memory_kind: str,
                    dst_device: DeviceSpec, dst_memory_kind: str) -> Any:
        return self._call("pjrtkit_copy_buffer", payload=payload, src_device=src_device,
                          src_memory_kind=src_memory_kind, dst_device=dst_device,
                          dst_memory_kind=dst_memory_kind)

    def buffer_address(self, *, payload, device: DeviceSpec, memory_kind: str) -> int | None:
        return self._call("pjrtkit_buffer_address", payload=payload, device=device,
                          memory_kind=memory_kind)

    def memory_stats(self, *, device: DeviceSpec, tracked: MemoryStats) -> MemoryStats:
        return self._call("pjrtkit_memory_stats", device=device, tracked=tracked)

    # -- compile and execute -----------------------------------------------------------------
    def compile(self, *, program, options: CompileOptions,
                devices: Sequence[DeviceSpec]) -> CompiledProgram:
        """The plugin's compile of ``program``, rewritten first into the backend's primitive
        set when it declares one (``pjrtkit.expansions``)."""
        primitives = self.primitive_set()
        if primitives is not None:
            program = self._expanded(program, primitives)
        return self._call("pjrtkit_compile", program=program, options=options,
                          devices=tuple(devices))

    def primitive_set(self) -> PrimitiveSet | None:
        """What the backend's compiler implements itself (None: it takes programs as they
        are); asked once."""
        if self._primitive_set is _UNASKED:
            answer = self._call("pjrtkit_primitive_set")
            if answer is not None and not isinstance(answer, PrimitiveSet):
                raise Internal(f"{self.platform_name}: pjrtkit_primitive_set returned "
                               f"{type(answer).__name__}, expected PrimitiveSet or None")
            self._primitive_set = answer
        return self._primitive_set

    def _expanded(self, program, primitives: PrimitiveSet):
        from pjrtkit import expansions

        try:
            return expansions.expand(program, primitives)
        except PjrtError as exc:
            raise type(exc)(f"{self.platform_name}: {exc}", code=exc.code) from exc
        except MemoryError as exc:
            raise host_out_of_memory(exc, f"{self.platform_name}: expanding a program") from exc
        except Exception as exc:
            raise Internal(f"{self.platform_name}: bug in the core's expansions: "
                           f"{type(exc).__name__}: {exc}") from exc

    # -- capabilities ------------------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        """What the plugin declares, widened by what the core's expansions reach when it
        declares a primitive set."""
        answer = self._call("pjrtkit_capabilities")
        if not isinstance(answer, Capabilities):
            raise Internal(f"{self.platform_name}: pjrtkit_capabilities returned "
                           f"{type(answer).__name__}, expected Capabilities")
        primitives = self.primitive_set()
        if primitives is not None:
            from pjrtkit import expansions

            answer = expansions.widened(answer, primitives)
        return answer

    # -- what the ABI layer asks for ---------------------------------------------------------
    def plugin_attributes(self) -> dict[str, Any]:
        """PJRT_Plugin_Attributes: the versions XLA's own C API tests require."""
        from jaxlib.mlir.dialects import stablehlo

        def version(text: str) -> list[int]:
            return [int(part) for part in text.split(".")]

        return {
            "xla_version": 2,
            "stablehlo_current_version": version(stablehlo.get_current_version()),
            "stablehlo_minimum_version": version(stablehlo.get_minimum_version()),
            "pjrtkit_backend": self.name,
            "pjrtkit_version": self.version,
        }

    def topology_description(self, name: str, options: Mapping[str, Any]):
        """PJRT_TopologyDescription_Create: a compile-only topology as a runtime object."""
        from pjrtkit.runtime.topology import TopologyDescription

        return TopologyDescription(self, self.make_topology(name=name, options=options),
                                   compile_only=True)

    # -- what JAX is told --------------------------------------------------------------------
    def jax_lowering_rules(self) -> tuple[JaxLoweringRule, ...]:
        """Every implementation's JAX lowering rules, flattened; each primitive at most once;
        for a backend declaring a primitive set, the expansions' JAX rules for the primitives it
        gives none for."""
        answers = self._call("pjrtkit_jax_lowering_rules")
        rules: list[JaxLoweringRule] = []
        seen: set[int] = set()
        for answer in answers:
            for record in answer or ():
                if not isinstance(record, JaxLoweringRule):
                    raise InvalidArgument(
                        f"{self.platform_name}: pjrtkit_jax_lowering_rules yielded "
                        f"{type(record).__name__}; yield pjrtkit.types.JaxLoweringRule records")
                if id(record.primitive) in seen:
                    raise InvalidArgument(
                        f"{self.platform_name}: pjrtkit_jax_lowering_rules names primitive "
                        f"{record.primitive} twice; JAX keeps one rule per primitive and platform")
                seen.add(id(record.primitive))
                rules.append(record)
        if self.primitive_set() is not None:
            # JAX-level expansions (primitives JAX lowers only on its own platforms) for the
            # primitives the plugin gives no rule of its own
            from pjrtkit import expansions

            rules += [r for r in expansions.jax_lowering_rules() if id(r.primitive) not in seen]
        return tuple(rules)


_OPTIONAL_ANSWERS = frozenset({"pjrtkit_make_topology", "pjrtkit_primitive_set",
                               "pjrtkit_multi_process"})
_UNASKED = object()
