"""Everything pjrtkit needs from JAX that JAX does not promise to keep, in one place.

pjrtkit supports more than one JAX release (``SUPPORTED_JAX``). Wherever it reaches past JAX's
public API (``jax._src``, ``jaxlib``'s Python modules, the allowlists JAX keys by platform name)
or depends on a fact that changes between releases (the PJRT C API minor jaxlib speaks, the
StableHLO versions it reads and writes), the access lives here and nowhere else, so a JAX upgrade
is one module to re-check. ``tests/test_jax_compat.py`` pins each fact and fails, naming the
attribute, when a JAX release moves one.

Imports of JAX happen inside the functions: ``pjrtkit list`` and the discovery of backends must
work without starting JAX.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import re
from typing import Any


@dataclasses.dataclass(frozen=True)
class Release:
    """Facts of one tested JAX release that pjrtkit depends on (checked by the tests)."""

    jax: str                 # jax == jaxlib version tested
    python: str              # the Python versions it installs on
    constraints: str         # the pinned set for it (make JAX=... picks it)
    pjrt_minor: int          # the PJRT C API minor jaxlib itself speaks (it accepts older)
    stablehlo_current: str   # the StableHLO version jaxlib's serializer writes by default


# One release per supported (major, minor) line: the newest tested one. pjrtkit's own PJRT_Api
# declares minor abi.api.API_VERSION (0.90), which every release here accepts.
SUPPORTED_JAX = {
    (0, 10): Release("0.10.2", "3.11", "constraints.txt", 112, "1.17.0"),
    (0, 11): Release("0.11.2", "3.12, 3.13", "constraints-jax0.11.txt", 115, "1.20.0"),
    (0, 12): Release("0.12.0.1", "3.12, 3.13", "constraints-jax0.12.txt", 116, "1.22.0"),
}


def version_tuple(text: str) -> tuple[int, ...]:
    """'0.12.0.1' -> (0, 12, 0, 1); a suffix such as 'rc1' or '.dev2026' ends the number."""
    leading = re.match(r"\d+(?:\.\d+)*", text)
    return tuple(int(part) for part in leading.group().split(".")) if leading else ()


def installed_versions() -> dict[str, str]:
    """Versions of jax and jaxlib as installed (from package metadata: JAX is not imported)."""
    found = {}
    for name in ("jax", "jaxlib"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def release_line(jax_version: str | None = None) -> Release | None:
    """The SUPPORTED_JAX entry of the installed (or given) jax's release line, or None."""
    text = jax_version if jax_version is not None else installed_versions()["jax"]
    return SUPPORTED_JAX.get(version_tuple(text)[:2])


def support_problem(jax_version: str | None = None) -> str | None:
    """Why the installed (or given) jax is outside the tested release lines, or None."""
    text = jax_version if jax_version is not None else installed_versions()["jax"]
    if release_line(text) is not None:
        return None
    tested = ", ".join(release.jax for release in SUPPORTED_JAX.values())
    return (f"jax {text} is not a release line pjrtkit is tested with ({tested}); "
            "see 'JAX versions' in pjrtkit's README")


# The release lines whose Pallas Triton lowering (``pl.pallas_call`` with the Triton backend)
# the GPU plugins compile: jax 0.10, 0.11 and 0.12 lower it to the custom call
# ``__gpu$xla.gpu.triton`` carrying the kernel's Triton IR as MLIR bytecode (jax 0.11.2's
# ``pallas/triton/pallas_call_registration.py`` is 0.12.0.1's, byte for byte). jax 0.11 and
# 0.12 ask ``jax._src.pallas.triton.gpu_info`` for the device's GPU first
# (``register_pallas_gpu``). A line not listed raises NotImplementedError at lowering.
PALLAS_TRITON_RELEASE_LINES = frozenset({(0, 10), (0, 11), (0, 12)})


def register_pallas_gpu(device_kind: str, target: str) -> None:
    """Tell a jax whose Pallas Triton lowering asks which GPU the device is (0.12's
    ``jax._src.pallas.triton.gpu_info``: it knows NVIDIA's names and ``gfx`` kinds on its own
    platforms) that ``device_kind`` is a ``target`` GPU ("sm_90", "gfx942"). A no-op on a jax
    that does not ask (0.10)."""
    try:
        from jax._src.pallas.triton import gpu_info
    except ImportError:
        return
    registry = getattr(gpu_info, "registry", None)
    if registry is None:
        return
    if target.startswith("sm_"):
        digits = target[len("sm_"):]
        arch_name, capability = f"{digits[:-1]}.{digits[-1]}", int(digits)
    else:
        arch_name, capability = target, 0
    registry[device_kind] = lambda: gpu_info.GpuInfo(gpu_version=None, arch_name=arch_name,
                                                     compute_capability=capability)


def pallas_triton_supported(jax_version: str | None = None) -> bool:
    """Whether the installed (or given) jax's Pallas Triton kernels compile on the GPU
    plugins (``PALLAS_TRITON_RELEASE_LINES``)."""
    text = jax_version if jax_version is not None else installed_versions()["jax"]
    return version_tuple(text)[:2] in PALLAS_TRITON_RELEASE_LINES


def xla_integer_power_uses_every_exponent_bit() -> bool:
    """How the installed XLA CPU backend (the reference) computes integer ``stablehlo.power``.

    Up to jaxlib 0.11 it squares over the low 6 exponent bits only, and an unsigned exponent
    with its top bit set counts as negative; from 0.12 it is exact exponentiation modulo 2^bits
    over every exponent bit. pjrtkit_cpu implements the former, so on 0.12 its integer power
    differs from XLA's for exponents of 64 and more (JAX's own API never emits integer power).
    """
    return version_tuple(installed_versions()["jaxlib"])[:2] >= (0, 12)


def xla_flushes_bfloat16_denormals_converting_to_bool() -> bool:
    """Whether the installed XLA CPU backend (the reference) reads a bfloat16 denormal as zero
    when converting it to bool: jaxlib 0.12's does (1e-39 -> False), 0.10's does not (True,
    as pjrtkit's semantics and its backends give). Measured; 0.11 not measured."""
    return version_tuple(installed_versions()["jaxlib"])[:2] >= (0, 12)


def jax_writes_complex_abs_as_real_arithmetic() -> bool:
    """Whether ``lax.abs`` of a complex value lowers to real arithmetic on its parts (jax 0.12:
    real, imag, abs, maximum, ...) instead of ``stablehlo.abs`` on complex (jax 0.10)."""
    return version_tuple(installed_versions()["jax"])[:2] >= (0, 12)


# -- registering a platform ----------------------------------------------------------------


def register_plugin(platform: str, *, priority: int, c_api: Any) -> None:
    """Register a PJRT_Api capsule with JAX under ``platform``.

    ``jax._src.xla_bridge.register_plugin`` is the only way to hand JAX a ``PJRT_Api`` made in
    process (no shared library); same keyword arguments in every supported release.

    JAX registers plugins with ``fail_quietly=False``: with ``JAX_PLATFORMS`` unset, a plugin
    whose client fails to start makes every JAX program raise. A pjrtkit platform is never the
    default backend, so its registration is made quiet: JAX then records the error, the other
    backends start, and asking for the platform raises JAX's "failed to initialize" with it.
    Naming it in ``JAX_PLATFORMS`` still fails loudly (JAX ignores the flag there).
    """
    from jax._src import xla_bridge

    xla_bridge.register_plugin(platform, priority=priority, c_api=c_api)
    registration = xla_bridge._backend_factories.get(platform)
    if registration is not None:
        registration.fail_quietly = True


def linalg_primitive(name: str):
    """``jax.lax.linalg``'s primitive ``<name>_p``; ``geqp3_p`` is only in the private module
    (jax 0.10.2 to 0.12)."""
    from jax._src.lax import linalg

    return getattr(linalg, f"{name}_p")


def is_jacobi_eigh(algorithm) -> bool:
    """Whether ``eigh_p``'s ``algorithm`` parameter asks for Jacobi
    (``lax.linalg.EighImplementation.JACOBI``: the form JAX's QDWH eigh asks for its blocks)."""
    from jax._src.lax import linalg

    return algorithm == linalg.EighImplementation.JACOBI


def eigh_qdwh_implementation():
    """JAX's QDWH-based eigh (the TPU's): ``impl(x, *, lower, sort_eigenvalues,
    subset_by_index) -> (vectors, values)``, blocks of at most 256 solved by ``eigh_p`` with
    the Jacobi algorithm (``jax._src.tpu.linalg.eigh._eigh_qdwh_impl``, jax 0.10.2 to 0.12)."""
    from jax._src.tpu.linalg import eigh

    return eigh._eigh_qdwh_impl


def svd_polar_lowering():
    """JAX's lowering rule of ``svd_p`` by the polar decomposition (QDWH, the TPU's; JAX
    registers it for every platform): ``rule(ctx, operand, *, full_matrices, compute_uv,
    subset_by_index, algorithm)`` (``jax._src.tpu.linalg.svd._svd_tpu_lowering_rule``)."""
    from jax._src.tpu.linalg import svd

    return svd._svd_tpu_lowering_rule


def linalg_function(name: str):
    """A function of ``jax._src.lax.linalg`` that ``jax.lax.linalg`` does not export
    (``geqrf``, ``householder_product``: the primitives behind QR; jax 0.10.2 to 0.12)."""
    from jax._src.lax import linalg

    return getattr(linalg, name)


def backends_are_initialized() -> bool:
    """Whether JAX has started its backends (after which ``jax_platforms`` is ignored).

    JAX has no public way to ask this.
    """
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def initialized_backend_names() -> list[str]:
    """The platforms whose clients JAX has created so far (tests use it to show that a
    compile-only topology made no client). JAX has no public way to ask this."""
    from jax._src import xla_bridge

    return sorted(xla_bridge._backends)


def platform_is_registered(platform: str) -> bool:
    """Whether a backend factory is registered under ``platform`` (by us or anyone else)."""
    from jax._src import xla_bridge

    return platform in xla_bridge._backend_factories  # JAX keeps no public registry


# -- JAX's allowlists keyed by platform name -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Allowlist:
    """One place where JAX decides by platform name, and what pjrtkit does about it."""

    feature: str
    where: str          # module and name in JAX
    extended: bool      # pjrtkit adds its platforms to it
    why: str


ALLOWLISTS = (
    Allowlist("buffer donation", "jax._src.interpreters.mlir._platforms_with_donation", True,
              "a module-level list: JAX emits donation only for the platforms in it"),
    Allowlist("Python host callbacks", "jax._src.callback.emit_python_callback", False,
              "a set literal inside the function; the callback lowers to the custom call "
              "xla_ffi_python_cpu_callback, which no pjrtkit plugin implements"),
    Allowlist("persistent compilation cache", "jax._src.compilation_cache.is_cache_used", False,
              "a list literal inside the function; pjrtkit platforms are not cached on disk"),
)


def platforms_with_donation() -> list[str]:
    """JAX's donation allowlist itself (the list object JAX reads, not a copy)."""
    from jax._src.interpreters import mlir

    return mlir._platforms_with_donation  # the allowlist; no public API


def allow_donation(platform: str) -> None:
    """Let JAX emit buffer donation for ``platform`` (idempotent)."""
    allowlist = platforms_with_donation()
    if platform not in allowlist:
        allowlist.append(platform)


def extend_allowlists(platform: str) -> None:
    """Add ``platform`` to every allowlist in ALLOWLISTS marked ``extended``."""
    allow_donation(platform)


# -- StableHLO and jaxlib's MLIR bindings -----------------------------------------------------


def stablehlo_version_range() -> tuple[str, str]:
    """(current, minimum) StableHLO versions jaxlib's bindings read and write, as 'a.b.c'.

    jaxlib 0.10.2 writes 1.17.0, 0.11.2 1.20.0, 0.12.0.1 1.22.0 (SUPPORTED_JAX); pjrtkit reads
    programs with the same bindings, so a plugin supports exactly this range.
    """
    from jaxlib.mlir.dialects import stablehlo

    return stablehlo.get_current_version(), stablehlo.get_minimum_version()


def make_ir_context():
    """An MLIR context with every dialect JAX's programs use registered: the dialects JAX's own
    ``mlir.make_ir_context`` registers, from jaxlib alone. Importing ``jax`` costs the parser
    child about 0.4 s of its start (``stablehlo/isolation.py``), and a user's first compile
    waits for that start; JAX's own function is the fallback where jaxlib moved a piece."""
    try:
        return _jaxlib_ir_context()
    except (ImportError, AttributeError):
        from jax.interpreters import mlir

        return mlir.make_ir_context()


def _jaxlib_ir_context():
    """JAX's ``make_ir_context`` (jax-v0.10.2 to 0.12) without importing jax: JAX's upstream
    dialect registry (``_jax_mlir_ext.register_dialects``), loaded into a context that does not
    load every linked dialect first, then sdy, mpmd, mhlo, chlo and stablehlo. Multithreading
    off: a parse does not use MLIR's thread pool (JAX shares one global pool instead)."""
    from jaxlib.mlir import ir
    from jaxlib.mlir._mlir_libs import _jax_mlir_ext
    from jaxlib.mlir.dialects import chlo, mhlo, sdy, stablehlo

    class _Context(ir.Context):
        def __init__(self):
            # ir.Context.__init__ would load every dialect linked into jaxlib, as JAX avoids.
            super(ir.Context, self).__init__()

    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    context = _Context()
    context.append_dialect_registry(registry)
    context.load_all_available_dialects()
    context.enable_multithreading(False)
    sdy.register_dialect(context)
    try:
        from jaxlib.mlir.dialects import mpmd
    except ImportError:  # jaxlib without the MPMD dialect
        pass
    else:
        mpmd.register_dialect(context)
    mhlo.register_mhlo_dialect(context)
    chlo.register_dialect(context)
    stablehlo.register_dialect(context)
    return context


def serialize_portable_artifact(module_text: str, target_version: str | None = None) -> bytes:
    """StableHLO text -> the portable artifact jaxlib hands a plugin (VHLO at ``target_version``,
    default jaxlib's current). jaxlib's serializer also legalizes CHLO to StableHLO."""
    from jax._src.lib import _jax

    if target_version is None:
        target_version = stablehlo_version_range()[0]
    return _jax.mlir.serialize_portable_artifact(module_text, target_version, False)


# -- jaxlib's XLA protos ---------------------------------------------------------------------


def xla_client():
    """jaxlib's ``xla_client`` module (CompileOptions, DeviceAssignment, DeviceList)."""
    from jaxlib import xla_client as module

    return module


def serialized_device_assignment(assignment) -> bytes:
    """A DeviceAssignmentProto for a (replicas, partitions) array of device ids."""
    import numpy as np

    array = np.array(assignment, dtype=np.int64)
    return xla_client().DeviceAssignment.create(array).serialize()


# -- XLA's SPMD partitioner (many devices; see ../shared/MANY_DEVICES.md) -----------------------

_private_cpu_client = None


def private_xla_cpu_client(num_devices: int):
    """A private in-process XLA:CPU client with at least ``num_devices`` devices, made lazily
    and kept (about 2.5 ms; it lives beside JAX's own cpu client and is never given to JAX).

    ``jax._src.lib.xla_client.make_cpu_client(num_devices=N)`` is private; the partitioner
    only compiles on it, to read XLA's program after its SPMD partitioning pass.
    """
    global _private_cpu_client
    client = _private_cpu_client
    if client is None or len(client.devices()) < num_devices:
        from jax._src.lib import xla_client as private_xla_client

        client = private_xla_client.make_cpu_client(num_devices=num_devices)
        _private_cpu_client = client
    return client


def compile_with_hlo_dump(code: bytes, compile_options: bytes, num_replicas: int,
                          num_partitions: int, dump_dir: str) -> str | None:
    """Compile ``code`` on the private XLA:CPU client with the given options bytes (identity
    device assignment, cheap back-end settings) and XLA's HLO dump around its SPMD pass
    written to ``dump_dir`` as protos. Returns XLA's error message when the compile failed
    (the dump may still hold what was written before the failure), else None."""
    import numpy as np

    xc = xla_client()
    client = private_xla_cpu_client(num_replicas * num_partitions)
    options = xc.CompileOptions.ParseFromString(compile_options)
    # The caller's own overrides first (XLA refuses unknown or ill-typed ones, as it would on
    # its own backend); the partitioner's settings after them win.
    options.env_option_overrides = list(options.env_option_overrides) + [
        ("xla_dump_to", dump_dir),
        ("xla_dump_hlo_pass_re", "spmd-partitioning"),
        ("xla_dump_hlo_as_proto", True),
        ("xla_dump_hlo_as_text", False),
        # Without this, the collectives the partitioner adds name their groups by mesh axes
        # (#stablehlo.replica_group_mesh_axes). Those JAX 0.11+ writes itself for shard_map
        # stay so; pjrtkit.collectives.groups materializes both forms.
        ("xla_enable_rgv3_materialization", False),
        ("xla_backend_optimization_level", 0),
        ("xla_llvm_disable_expensive_passes", True),
    ]
    build = options.executable_build_options
    build.num_replicas = num_replicas
    build.num_partitions = num_partitions
    build.device_assignment = xc.DeviceAssignment.create(
        np.arange(num_replicas * num_partitions).reshape(num_replicas, num_partitions))
    options.num_replicas = num_replicas
    options.num_partitions = num_partitions
    devices = client.devices()[:num_replicas * num_partitions]
    try:
        if hasattr(client, "compile_and_load"):
            client.compile_and_load(code, xc.DeviceList(tuple(devices)), options)
        else:  # older jaxlib spelling
            client.compile(code, options)
    except Exception as exc:  # noqa: BLE001 - XLA's own error becomes the caller's message
        return f"{type(exc).__name__}: {exc}"
    return None


def run_per_device_program(code: bytes, arguments: list[list[Any]], *, num_replicas: int = 1,
                           devices=None) -> list[list[Any]]:
    """Run a per-device program on ``len(arguments)`` devices, ``num_replicas`` replicas of
    ``len(arguments) // num_replicas`` partitions each (device d is replica d // P, partition
    d % P), with CompileOptions built here as a caller of PJRT that is not JAX's jit would:
    ``arguments[d]`` are device d's arrays (rank 1 or more); returns each device's results as
    NumPy arrays. Over several partitions, arguments and results must be marked
    ``mhlo.sharding = "{manual}"``.

    ``devices`` None runs on the private XLA:CPU client (XLA's own collective semantics, for
    tests that compare the core's collectives with it: only a client's own compile call takes
    a program whose per-device arrays differ); else on those devices' client (a pjrtkit one).
    """
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    xc = xla_client()
    count = len(arguments)
    partitions = count // num_replicas
    if devices is None:
        devices = private_xla_cpu_client(count).devices()[:count]
    devices = list(devices)[:count]
    client = devices[0].client
    options = xc.CompileOptions()
    options.num_replicas, options.num_partitions = num_replicas, partitions
    build = options.executable_build_options
    build.num_partitions, build.num_replicas = partitions, num_replicas
    build.use_spmd_partitioning = partitions > 1
    build.use_shardy_partitioner = False
    build.device_assignment = xc.DeviceAssignment.create(
        np.array([d.id for d in devices]).reshape(num_replicas, partitions))
    executable = client.compile_and_load(bytes(code), xc.DeviceList(tuple(devices)), options)
    sharding = NamedSharding(Mesh(np.array(devices), ("devices",)), PartitionSpec("devices"))
    global_arguments = []
    for index in range(len(arguments[0])):
        shards = [jax.device_put(np.asarray(arguments[d][index]), devices[d])
                  for d in range(count)]
        local = np.shape(arguments[0][index])  # rank >= 1: devices stack along dimension 0
        shape = (count * local[0], *local[1:])
        global_arguments.append(
            jax.make_array_from_single_device_arrays(shape, sharding, shards))
    outputs = executable.execute_sharded(global_arguments)
    per_output = outputs.disassemble_into_single_device_arrays()
    return [[np.asarray(per_output[i][d]) for i in range(len(per_output))]
            for d in range(count)]


def hlo_module_to_stablehlo(module_proto: bytes) -> bytes:
    """A serialized ``xla.HloModuleProto`` -> StableHLO bytecode (jaxlib's private converter)."""
    from jax._src.lib import _jax

    return bytes(_jax.mlir.hlo_to_stablehlo(module_proto))


def configured_cpu_device_count() -> int | None:
    """JAX's ``jax_num_cpu_devices`` setting when it was set (JAX's default is -1: unset).

    Read only when JAX is already imported: a pjrtkit client is made by JAX, after the user's
    ``jax.config.update``; reading it never imports JAX.
    """
    import sys

    if "jax" not in sys.modules:
        return None
    try:
        value = int(sys.modules["jax"].config.jax_num_cpu_devices)
    except (AttributeError, TypeError, ValueError):
        return None
    return value if value > 0 else None


# -- jax.experimental.compute_on: a region computed on the device's host ----------------------
# jax 0.10.2 and 0.11 have a context manager, ``with compute_on("device_host"):``; jax 0.12 made
# it a function transform, ``compute_on(f, compute_type=..., out_memory_spaces=...)``.

def compute_on_device_host(fn):
    """``fn`` computed on the device's host (JAX's ``compute_on("device_host")``), its results
    placed in device memory, on every supported JAX release."""
    import functools
    import inspect

    from jax.experimental.compute_on import compute_on

    if "out_memory_spaces" in inspect.signature(compute_on).parameters:
        import jax

        return compute_on(fn, compute_type="device_host",
                          out_memory_spaces=jax.memory.Space.Device)

    @functools.wraps(fn)
    def on_host(*args, **kwargs):
        with compute_on("device_host"):
            return fn(*args, **kwargs)

    return on_host


# -- jax.experimental.mesh_utils: physical device meshes --------------------------------------
# JAX arranges devices by their physical coordinates (coords, core_on_chip) only when
# ``devices[-1].platform == "tpu"`` (jax/_src/mesh_utils.py create_device_mesh); any other
# platform gets its devices in list order. A platform whose devices are laid out like TPUs
# (``PlatformInfo.device_mesh_like == "tpu"``) is given the same arrangement: the devices are
# handed to JAX's own function behind a view that reports the like platform, and the mesh it
# returns holds the real devices again. Written against jax 0.10.2-0.12.

_DEVICE_MESH_LIKE: dict[str, str] = {}


class _DeviceAsPlatform:
    """A device that reports another platform name; everything else is the device's."""

    __slots__ = ("device", "platform")

    def __init__(self, device, platform: str):
        self.device = device
        self.platform = platform

    def __getattr__(self, name):
        return getattr(self.device, name)


def _physical_mesh_wrapper(original):
    import numpy as np

    def create_device_mesh(mesh_shape, devices=None, *args, **kwargs):
        if devices is None:
            import jax

            devices = jax.devices()
        like = _DEVICE_MESH_LIKE.get(devices[-1].platform) if len(devices) else None
        if like is None:
            return original(mesh_shape, devices, *args, **kwargs)
        views = [_DeviceAsPlatform(d, like) for d in devices]
        mesh = original(mesh_shape, views, *args, **kwargs)
        return np.vectorize(lambda view: view.device, otypes=[object])(mesh)

    create_device_mesh.__wrapped__ = original
    create_device_mesh.__doc__ = original.__doc__
    return create_device_mesh


def extend_device_mesh(platform: str, like: str) -> None:
    """Let ``mesh_utils.create_device_mesh`` (and ``create_hybrid_device_mesh``, ``jax.make_mesh``,
    which call it) lay out ``platform``'s devices as it lays out ``like``'s (idempotent)."""
    from jax._src import mesh_utils as private_mesh_utils
    from jax.experimental import mesh_utils

    _DEVICE_MESH_LIKE[platform] = like
    if not hasattr(private_mesh_utils.create_device_mesh, "__wrapped__"):
        wrapper = _physical_mesh_wrapper(private_mesh_utils.create_device_mesh)
        private_mesh_utils.create_device_mesh = wrapper
        mesh_utils.create_device_mesh = wrapper


# -- jax.export: what was exported for the platform a plugin is like ----------------------------
# ``Exported.call`` binds ``call_exported_p``, whose one (platform-independent) lowering rule
# checks that every lowering platform is among the export's platforms, by name. A platform like
# cpu (or tpu) runs what was exported for cpu (or tpu): pjrtkit's rule for its platform calls
# JAX's with the lowering platforms renamed (``jax_export``). Written against jax 0.10.2-0.12.

def exported_call_rule():
    """(``call_exported_p``, JAX's lowering rule of it): what ``Exported.call`` binds."""
    from jax._src.export import _export

    return _export.call_exported_p, _export._call_exported_lowering  # noqa: SLF001 - no public name


def exported_platforms(exported) -> tuple[str, ...]:
    """The lowering platforms an ``Exported`` (a public record) was made for."""
    return tuple(exported.platforms)


def with_lowering_platforms(ctx, platforms: tuple[str, ...]):
    """A lowering rule context ``ctx`` whose module reports ``platforms`` as its lowering
    platforms; everything else (the module being built, its symbol table, caches) is shared."""
    return ctx.replace(module_context=ctx.module_context.replace(platforms=tuple(platforms)))


def cpu_stable_custom_call_targets() -> tuple[str, ...]:
    """The custom-call targets of JAX's cpu lowering that ``jax.export`` guarantees stable
    (jaxlib's LAPACK FFI kernels, ``lapack_sgetrf_ffi``, ...): what a cpu export may carry."""
    from jax._src.export import _export

    return tuple(_export._CPU_FFI_KERNELS)  # noqa: SLF001 - JAX's own list, no public name


# -- compile options XLA checks ----------------------------------------------------------------

_CHECKED_OVERRIDES: dict[tuple, str | None] = {}
_TRIVIAL_PROGRAM = ("func.func @main(%a: tensor<f32>) -> tensor<f32> {\n"
                    "  return %a : tensor<f32>\n}\n")


def compile_option_overrides_problem(compile_options: bytes) -> str | None:
    """XLA's own refusal of the ``env_option_overrides`` of a serialized CompileOptionsProto
    (``jax.jit(..., compiler_options=...)``: a name that is no XLA option, a value of the wrong
    type), or None when XLA accepts them (or there are none). XLA applies the overrides before
    it compiles anything, so a trivial program compiled with them on the private XLA:CPU client
    answers exactly as XLA's CPU backend would; answers are kept per set of overrides."""
    xc = xla_client()
    options = xc.CompileOptions.ParseFromString(compile_options)
    overrides = tuple((str(name), repr(value)) for name, value in options.env_option_overrides)
    if not overrides:
        return None
    if overrides not in _CHECKED_OVERRIDES:
        trial = xc.CompileOptions()
        trial.env_option_overrides = list(options.env_option_overrides)
        client = private_xla_cpu_client(1)
        try:
            if hasattr(client, "compile_and_load"):
                client.compile_and_load(_TRIVIAL_PROGRAM, xc.DeviceList(tuple(client.devices()[:1])),
                                        trial)
            else:  # older jaxlib spelling
                client.compile(_TRIVIAL_PROGRAM, trial)
            problem = None
        except Exception as exc:  # noqa: BLE001 - XLA's own message is the answer
            problem = re.sub(r"^[A-Z_]+: ", "", str(exc))
        _CHECKED_OVERRIDES[overrides] = problem
    return _CHECKED_OVERRIDES[overrides]
