"""Executables: a compiled program (``Executable``) and one loaded on a client's devices
(``LoadedExecutable``), which runs asynchronously and reports completion through events."""
from __future__ import annotations

import hashlib
import math
from time import perf_counter

import numpy as np

from pjrtkit.collectives.launch import Launch, launch_on_threads
from pjrtkit.errors import Internal, InvalidArgument, PjrtError, host_out_of_memory
from pjrtkit.runtime import serialized_executable
from pjrtkit.runtime.buffer import Buffer, count_allocations
from pjrtkit.runtime.compile_options import parse_compile_options
from pjrtkit.runtime.event import Event, when_all
from pjrtkit.semantics.dtypes import TOKEN
from pjrtkit.stablehlo.ir import Program, TensorType
from pjrtkit.stablehlo import isolation
from pjrtkit.stablehlo.entry_layouts import entry_layouts, layout_attributes, row_major
from pjrtkit.stablehlo.loader import load_program
from pjrtkit.stablehlo.partition import partitioned_program
from pjrtkit.stablehlo.simplify import drop_scheduling_hints
from pjrtkit.types import CompiledProgram, CompileOptions

# A program whose estimated work is below this runs inline on the caller's thread (when the
# worker is idle and its inputs are ready): a thread hand-off costs tens of microseconds,
# more than such a program takes. Units: flops + bytes accessed (see ARCHITECTURE.md).
INLINE_WORK_LIMIT = 2_000_000
# The estimate is a guess (a while loop is priced as 1000 trips of its body; a native loop runs
# them in microseconds), so every execution is timed (wall clock: a thread's CPU clock costs a
# microsecond to read): a program whose last execution took less than this runs inline from
# then on; one whose last INLINE_SLOW_RUNS executions each took more than INLINE_TIME_LIMIT_S *
# INLINE_TIME_HYSTERESIS goes to the worker (one slow run can be the scheduler's doing, not
# the program's). See ``InlineSpeed``.
INLINE_TIME_LIMIT_S = 0.001
INLINE_TIME_HYSTERESIS = 4.0
INLINE_SLOW_RUNS = 3

# Completion of every inline execution that succeeded: a completed event never changes, so one
# serves them all.
_DONE = Event.completed()


def load_and_compile(backend, code: bytes, fmt: str, compile_options: bytes, device_specs_for):
    """Shared by Client.compile and TopologyDescription.compile."""
    if fmt != "mlir":
        raise InvalidArgument(f"{backend.platform_name}: program format {fmt!r} is not "
                              f"supported; expected 'mlir' (StableHLO)")
    options = parse_compile_options(compile_options)
    per_device_code = None
    if options.num_partitions > 1:
        # One global program -> the program each device runs (XLA's SPMD partitioner).
        program, per_device_code = partitioned_program(
            code, options.serialized, num_replicas=options.num_replicas,
            num_partitions=options.num_partitions, isolated=isolation.ENABLED)
    else:
        program = load_program(code, num_partitions=options.num_partitions,
                               num_replicas=options.num_replicas, isolated=isolation.ENABLED)
    program = drop_scheduling_hints(program)
    specs = device_specs_for(options)
    compiled = backend.compile(program=program, options=options, devices=specs)
    if not isinstance(compiled, CompiledProgram):
        raise Internal(f"{backend.platform_name}: pjrtkit_compile returned "
                       f"{type(compiled).__name__}, expected CompiledProgram")
    if not callable(getattr(compiled.executable, "execute", None)):
        raise Internal(f"{backend.platform_name}: pjrtkit_compile returned a CompiledProgram "
                       f"whose executable ({type(compiled.executable).__name__}) has no "
                       f"execute(arguments, devices) method (see pjrtkit.types."
                       f"PluginExecutable)")
    return Executable(backend, program, options, bytes(code), compiled,
                      per_device_code=per_device_code)


def execution_error(exe: "Executable", exc: Exception) -> PjrtError:
    """What an exception raised by the plugin's ``execute`` becomes: a PjrtError keeps its
    code; anything else is INTERNAL naming the backend, the executable's type and the program,
    since it is a bug in the plugin rather than something the user did."""
    if isinstance(exc, PjrtError):
        return exc
    if isinstance(exc, MemoryError):
        return host_out_of_memory(exc, f"{exe.backend.platform_name}: executing {exe.name}")
    return Internal(f"{exe.backend.platform_name}: {type(exe.compiled.executable).__name__}"
                    f".execute raised {type(exc).__name__}: {exc} while executing {exe.name}")


class Executable:
    def __init__(self, backend, program: Program, options: CompileOptions, code: bytes,
                 compiled: CompiledProgram, *, per_device_code: bytes | None = None):
        self.backend = backend
        # The partitioned program (StableHLO bytecode) when Compile was given a global
        # program over several partitions; None when the program is run as given.
        self.per_device_code = per_device_code
        self.program = program
        self.options = options
        self.code = code
        self.compiled = compiled
        main = program.main
        self.name = str(program.attributes.get("sym_name", main.name))
        self.num_replicas = options.num_replicas
        self.num_partitions = options.num_partitions
        outputs = [t for t in main.result_types]
        self.output_dtypes = [t.dtype if isinstance(t, TensorType) else TOKEN for t in outputs]
        self.output_shapes = [t.shape if isinstance(t, TensorType) else (0,) for t in outputs]
        self.num_outputs = len(outputs)
        self.output_memory_kinds = [
            str(attrs.get("mhlo.memory_kind", "device")) for attrs in
            (main.result_attributes or [{}] * len(outputs))]
        params = [v.type for v in main.arguments]
        self.parameter_dtypes = [t.dtype for t in params if isinstance(t, TensorType)]
        self.parameter_shapes = [t.shape for t in params if isinstance(t, TensorType)]
        # What each argument must be, (dtype, shape); None for a token (any buffer will do).
        self.argument_types = [(np.dtype(t.dtype), tuple(int(d) for d in t.shape))
                               if isinstance(t, TensorType) else None for t in params]
        self.num_parameters = len(params)
        self.donated_parameters = frozenset(
            i for i, attrs in enumerate(main.arg_attributes)
            if "tf.aliasing_output" in attrs or attrs.get("jax.buffer_donor"))
        # Concrete layouts JAX asked for (None: row-major); jax.experimental.layout.
        self.parameter_layouts, self.result_layouts = entry_layouts(program)
        self._layout_program: bytes | None = None
        self.compile_options = options.serialized
        self.fingerprint = hashlib.sha256(
            backend.platform_name.encode() + code + options.serialized).hexdigest()
        self.size_of_generated_code = int(compiled.code_size_bytes)

    def cost_analysis(self) -> dict[str, float]:
        cost = self.compiled.cost
        return {"flops": float(cost.flops), "bytes accessed": float(cost.bytes_accessed),
                "transcendentals": float(cost.transcendentals)}

    def compiled_memory_stats(self) -> dict[str, int]:
        def nbytes(dtypes, shapes):
            return int(sum(np.dtype(d).itemsize * int(np.prod(s, dtype=np.int64))
                           for d, s in zip(dtypes, shapes)))

        arguments, outputs = self.compiled.argument_bytes, self.compiled.output_bytes
        return {"argument_size_in_bytes": int(arguments) if arguments is not None
                else nbytes(self.parameter_dtypes, self.parameter_shapes),
                "output_size_in_bytes": int(outputs) if outputs is not None
                else nbytes(self.output_dtypes, self.output_shapes),
                "alias_size_in_bytes": 0, "temp_size_in_bytes": int(self.compiled.temp_bytes),
                "generated_code_size_in_bytes": self.size_of_generated_code}

    def optimized_program(self) -> bytes:
        """The program as compiled: the bytes Compile was given (portable artifact, MLIR
        bytecode or text; jaxlib reads all three as format "mlir"). pjrtkit does not rewrite
        the MLIR (plugins optimise in their plans; a program with concrete layouts gets its
        entry layouts as module attributes, ``entry_layouts``), and handing back the original bytes spares
        printing the module as text at load and jaxlib parsing that text again: about 4 ms of
        an MLP-step compile (jaxlib asks for this program four times per compile).

        A program partitioned over several devices answers with the per-device program XLA's
        partitioner made: jaxlib reads the output and parameter shardings from its module
        attributes ``mhlo.spmd_output_sharding`` / ``mhlo.spmd_parameters_shardings``."""
        code = self.per_device_code if self.per_device_code is not None else self.code
        if not any(self.parameter_layouts) and not any(self.result_layouts):
            return bytes(code)
        if self._layout_program is None:  # jaxlib reads the entry layouts from module attributes
            main = self.program.main
            parameters = [order or row_major(len(getattr(v.type, "shape", ())))
                          for order, v in zip(self.parameter_layouts, main.arguments)]
            results = [order or row_major(len(getattr(t, "shape", ())))
                       for order, t in zip(self.result_layouts, main.result_types)]
            self._layout_program = isolation.with_module_attributes_isolated(
                code, layout_attributes(tuple(parameters), tuple(results)))
        return self._layout_program

    def serialize(self) -> bytes:
        """The program and options themselves, so a later process can compile it again
        (the format: ``runtime/serialized_executable.py``)."""
        return serialized_executable.pack(self.backend.platform_name, self.code,
                                          self.options.serialized, self.fingerprint)


class NativePlan:
    """A loaded executable as the C execute path runs it (``LoadedExecutable.native_plan``):
    the plugin's ``kernel`` (``pjrtkit.types.NativeKernel``), the one ``device``, each
    argument's ``(dtype, shape)`` and each output's ``(dtype, shape, nbytes, memory)``."""

    __slots__ = ("kernel", "device", "arguments", "outputs")
    MAX_RANK = 8      # dims a handle struct holds (pjrtkit_handles.h)
    MAX_VALUES = 64   # arguments or outputs C handles per call (pjrtkit_native_execute.h)

    def __init__(self, kernel, device, arguments: tuple, outputs: tuple):
        self.kernel = kernel
        self.device = device
        self.arguments = arguments
        self.outputs = outputs


# ``native_plan`` of an executable the C execute path can never run.
NO_NATIVE_PLAN = "no native plan"


class InlineSpeed:
    """Whether a program is quick enough to run on the caller's thread: the cost estimate
    first (``quick``), then the time of each execution (``record``). A program whose last
    execution took less than INLINE_TIME_LIMIT_S is quick; one whose last INLINE_SLOW_RUNS
    executions each took more than INLINE_TIME_LIMIT_S * INLINE_TIME_HYSTERESIS is not; times
    in between change nothing (and break a run of slow ones)."""

    __slots__ = ("quick", "_slow_runs")

    def __init__(self, quick: bool):
        self.quick = quick
        self._slow_runs = 0  # consecutive executions slower than the hysteresis bound

    def record(self, elapsed: float) -> None:
        if elapsed < INLINE_TIME_LIMIT_S:
            self.quick = True
            self._slow_runs = 0
        elif elapsed > INLINE_TIME_LIMIT_S * INLINE_TIME_HYSTERESIS:
            self._slow_runs += 1
            if self._slow_runs >= INLINE_SLOW_RUNS:
                self.quick = False
        else:
            self._slow_runs = 0


class LoadedExecutable:
    def __init__(self, client, executable: Executable, devices: list):
        self.client = client
        self.executable = executable
        # ``devices``: the device assignment's, in position order (replica-major); in a job of
        # several processes some are other processes' devices, which this process never runs.
        self.addressable_devices = [d for d in devices if d.is_addressable]
        self.positions = [p for p, d in enumerate(devices) if d.is_addressable]
        self.remote = None
        if len(self.addressable_devices) < len(devices):
            from pjrtkit.distributed.exchange import ProcessExchange

            self.remote = ProcessExchange(client.distributed, [d.id for d in devices],
                                          [d.process_index for d in devices])
            client.distributed.prepare_engine()
        opts = executable.options
        if opts.device_assignment is not None:
            self.device_assignment = [list(row) for row in opts.device_assignment]
        else:
            self.device_assignment = [[d.id] for d in devices]
        self._deleted = False
        self._inline = self._inline_plan()
        # Whether the program is quick enough to run on the caller's thread: the cost estimate
        # first, then the measured time of each execution (``InlineSpeed.record``).
        cost = executable.compiled.cost
        self._speed = InlineSpeed(cost.flops + cost.bytes_accessed <= INLINE_WORK_LIMIT)

    def _inline_plan(self):
        """What ``execute_inline`` needs, decided once: None unless the program runs on one
        device and donates nothing."""
        exe = self.executable
        if (len(self.addressable_devices) != 1 or exe.donated_parameters
                or self.remote is not None or any(exe.result_layouts)):
            return None
        device = self.addressable_devices[0]
        outputs = []
        for dtype, shape, kind in zip(exe.output_dtypes, exe.output_shapes,
                                      exe.output_memory_kinds):
            dtype = np.dtype(dtype)
            shape = tuple(int(d) for d in shape)
            memory = _output_memory(device, kind)
            outputs.append((dtype, shape, math.prod(shape) * dtype.itemsize, memory))
        allocations = [(memory, nbytes, (dtype, shape)) for dtype, shape, nbytes, memory in outputs]
        # The plugin's execute as a bound method: one attribute lookup fewer per call.
        return (device, [device.spec], outputs, self.client.executor,
                exe.compiled.executable.execute, exe.num_parameters, allocations,
                exe.argument_types)

    def native_plan(self):
        """What the C execute path needs to run this executable without Python: a
        ``NativePlan`` once the plugin hands over a kernel (``NativeKernel``), None while it
        has not (ask again later), ``NO_NATIVE_PLAN`` when it never can: more than one
        device, donation, a token argument or output, a rank past ``NativePlan.MAX_RANK``,
        or a plugin executable without ``native_kernel``. Only for a program quick enough to
        run on the caller's thread (``InlineSpeed``): C runs it there."""
        plan = self._inline
        if plan is None or self._deleted:
            return NO_NATIVE_PLAN
        native_kernel = getattr(self.executable.compiled.executable, "native_kernel", None)
        if native_kernel is None:
            return NO_NATIVE_PLAN
        device, _specs, outputs = plan[:3]
        arguments = plan[7]
        if (any(a is None or len(a[1]) > NativePlan.MAX_RANK for a in arguments)
                or any(len(shape) > NativePlan.MAX_RANK for _d, shape, _n, _m in outputs)
                or len(arguments) > NativePlan.MAX_VALUES
                or len(outputs) > NativePlan.MAX_VALUES):
            return NO_NATIVE_PLAN
        if not self._speed.quick:
            return None
        kernel = native_kernel(device.spec)
        if kernel is None:
            return None
        return NativePlan(kernel, device, tuple(arguments), tuple(outputs))

    def execute_inline(self, arguments: list) -> tuple[list, Event] | None:
        """The common case of ``execute``, cheaply: one device, no donation, a cheap program,
        every input ready without error, the worker idle. Runs the program now, on the
        caller's thread, and returns (outputs, completion event), both already complete. When
        the program ran and failed, raises that execution's error (the call's own, as XLA's
        CPU client reports a failure it sees before returning). Returns None, having done
        nothing, whenever any of those conditions does not hold: then ``execute`` (the general
        path) must be used.

        No holds are taken: the execution is over before this returns, and the payloads it
        reads are referenced here meanwhile, so a concurrent delete cannot take them away.
        """
        plan = self._inline
        if plan is None or not self._speed.quick or self._deleted:
            return None
        (device, specs, outputs, executor, execute, num_parameters, allocations,
         argument_types) = plan
        if not executor.idle or len(arguments) != num_parameters:  # busy: queue behind it
            return None
        payloads = []
        for buf, expected in zip(arguments, argument_types):
            ready = buf.ready
            # Plain attribute reads of the runtime's own objects (no method calls): this loop
            # runs for every argument of every jitted call.
            if buf._deleted or not ready._ready or ready._error is not None:  # noqa: SLF001
                return None
            if expected is not None and (buf.shape != expected[1] or buf.dtype != expected[0]):
                return None  # the general path says what is wrong
            payloads.append(buf.payload)
        count_allocations(allocations)  # past a memory limit: RESOURCE_EXHAUSTED, nothing run
        started = perf_counter()
        try:
            results = execute([payloads], specs)
            self._speed.record(perf_counter() - started)
            if len(results) != 1 or len(results[0]) != len(outputs):
                raise _wrong_output_count(self.executable)
        except Exception as exc:  # noqa: BLE001 - the call's error (see the docstring)
            for memory, nbytes, _array in allocations:
                memory.freed(nbytes)
            raise execution_error(self.executable, exc)  # noqa: B904 - exc is its context
        client = self.client
        return [Buffer.computed(client, dtype, shape, nbytes, device, memory, payload, _DONE)
                for (dtype, shape, nbytes, memory), payload in zip(outputs, results[0])], _DONE

    @property
    def is_deleted(self) -> bool:
        return self._deleted

    def delete(self) -> None:
        self._deleted = True

    def destroy(self) -> None:
        self._deleted = True

    def execute(self, argument_lists, *, execute_device=None, non_donatable=frozenset()):
        exe = self.executable
        if self._deleted:
            raise InvalidArgument(f"executable {exe.name} was deleted")
        devices = [execute_device] if execute_device is not None else self.addressable_devices
        if len(argument_lists) != len(devices):
            raise InvalidArgument(f"executable {exe.name} runs on {len(devices)} device(s) but "
                                  f"got {len(argument_lists)} argument list(s)")
        for d, args in enumerate(argument_lists):
            if len(args) != exe.num_parameters:
                raise InvalidArgument(f"executable {exe.name} takes {exe.num_parameters} "
                                      f"argument(s); argument list {d} has {len(args)}")
            for i, (buf, expected) in enumerate(zip(args, exe.argument_types)):
                buf.check_usable(f"passed as argument {i} of {exe.name}")
                if expected is not None and (buf.dtype, buf.shape) != expected:
                    # jaxlib never does this; a C caller can, and the kernels must not see it.
                    raise InvalidArgument(
                        f"argument {i} of {exe.name} is {buf.dtype.name}{list(buf.shape)}, "
                        f"the program takes {expected[0].name}{list(expected[1])}")
        outputs = self._new_outputs(devices)  # first: past a memory limit nothing has changed
        donate = exe.donated_parameters - frozenset(non_donatable)
        sources = [[buf.donate() if i in donate else buf.hold() for i, buf in enumerate(args)]
                   for args in argument_lists]
        done = [Event() for _ in devices]
        inputs_ready = [buf.ready for args in sources for buf in args]

        # A program over several devices runs as one launch: a thread per device, meeting
        # at the core's rendezvous for collectives (pjrtkit.collectives), and with the devices
        # of other processes through the engine (pjrtkit.distributed).
        if execute_device is None and self.remote is not None:
            positions, remote = self.positions, self.remote

            def run_devices(exe, payloads, specs):
                return run_launch(exe, payloads, specs, positions=positions, remote=remote)
        elif len(devices) > 1 and exe.num_replicas * exe.num_partitions == len(devices):
            run_devices = run_launch
        else:
            run_devices = run_together

        def run(input_error):
            error = input_error
            if error is None:
                try:
                    payloads = [[buf.payload for buf in args] for args in sources]
                    started = perf_counter()
                    results = run_devices(exe, payloads, [dev.spec for dev in devices])
                    self._speed.record(perf_counter() - started)
                    if len(results) != len(devices) or any(
                            len(r) != exe.num_outputs for r in results):
                        raise _wrong_output_count(exe)
                    for outs, res in zip(outputs, results):
                        for buf, payload in zip(outs, res):
                            buf.payload = payload
                except Exception as exc:  # noqa: BLE001 - delivered through the events
                    error = execution_error(exe, exc)
            for args in sources:
                for buf in args:
                    buf.unhold()
            for outs, event in zip(outputs, done):
                for buf in outs:
                    buf.ready.set(error)
                event.set(error)

        executor = self.client.executor
        if (self._speed.quick and executor.idle
                and all(e.is_ready() for e in inputs_ready)):
            when_all(inputs_ready, run)
        else:
            executor.submit(lambda: when_all(inputs_ready, run))
        return outputs, done

    def _new_outputs(self, devices) -> list[list[Buffer]]:
        """Pending output buffers per device, their bytes counted; when one is past a memory
        limit, the ResourceExhausted with none of them counted."""
        exe = self.executable
        made: list[Buffer] = []
        try:
            outputs = []
            for dev in devices:
                outs = []
                for dtype, shape, kind, layout in zip(exe.output_dtypes, exe.output_shapes,
                                                      exe.output_memory_kinds,
                                                      exe.result_layouts):
                    outs.append(Buffer(self.client, dtype, shape, dev, _output_memory(dev, kind),
                                       ready=Event()))
                    outs[-1].minor_to_major = layout
                    made.append(outs[-1])
                outputs.append(outs)
            return outputs
        except BaseException:
            for buf in made:
                buf.destroy()
            raise


def _output_memory(device, kind: str):
    """The memory of ``device`` an output with memory kind ``kind`` lives in (an unknown or
    absent kind: the device's default memory)."""
    return (device.memory(kind) if kind in ("device", "pinned_host", "unpinned_host")
            else device.default_memory)


def run_together(exe: Executable, payloads: list, specs: list) -> list:
    """Every device's program in one call of the plugin's ``execute`` (no collectives)."""
    return exe.compiled.executable.execute(payloads, specs)


def run_launch(exe: Executable, payloads: list, specs: list, *,
               positions: list[int] | None = None, remote=None) -> list:
    """One launch over several devices: the plugin's ``execute_launch`` when it has one and
    every device of the launch is in this process (every device on this thread, in lockstep:
    ``pjrtkit.collectives.lockstep``), else (``pjrtkit.collectives.launch.launch_on_threads``)
    the plugin's ``execute`` for each device on its own thread. ``payloads[i]`` and ``specs[i]``
    belong to ``positions[i]`` (default: every position; a job of several processes runs its
    own and meets the others through ``remote``)."""
    plugin = exe.compiled.executable
    execute_launch = getattr(plugin, "execute_launch", None)
    if execute_launch is not None and positions is None and remote is None:
        results = execute_launch(payloads, specs,
                                 Launch(exe.name, exe.num_replicas, exe.num_partitions))
        if results is not None:
            return results
    execute = plugin.execute
    index = {p: i for i, p in enumerate(positions)} if positions is not None else None

    def run_device(position: int) -> list:
        i = position if index is None else index[position]
        out = execute([payloads[i]], [specs[i]])
        if len(out) != 1:
            raise _wrong_output_count(exe)
        return out[0]

    return launch_on_threads(exe.name, exe.num_replicas, exe.num_partitions, run_device,
                             lambda exc: execution_error(exe, exc), positions=positions,
                             remote=remote)


def _wrong_output_count(exe: Executable) -> Internal:
    return Internal(f"{exe.backend.platform_name}: {type(exe.compiled.executable).__name__}"
                    f".execute returned the wrong number of outputs for {exe.name} (expected "
                    f"one list of {exe.num_outputs} payload(s) per device)")
