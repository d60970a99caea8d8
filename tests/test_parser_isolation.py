"""The runtime's isolated parser (pjrtkit.stablehlo.isolation): programs that crash jaxlib's
deserializer (found by the program fuzz harness, kept in tests/data) become INVALID_ARGUMENT
and the process lives; the next parse works; the IR that comes back is the in-process IR."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jaxlib
import numpy as np
import pytest

from pjrtkit.errors import InvalidArgument
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.stablehlo.loader import load_program
from pjrtkit.testing.programs import portable_artifact

DATA = os.path.join(os.path.dirname(__file__), "data")
CRASHERS = ["damaged_artifact_aborts_parser.mlirbc", "damaged_artifact_segfaults_parser.mlirbc"]


def _program(x, w):
    import jax
    return jax.nn.relu(x @ w).sum(axis=0), np.full((3, 4), 0.5, np.float32) * x


@pytest.mark.parametrize("name", CRASHERS)
def test_a_program_that_crashes_the_parser_is_invalid_and_the_process_lives(name):
    """Run in a child so that, were the isolation broken, the abort would fail this test
    instead of killing pytest."""
    script = textwrap.dedent(f"""
        from pjrtkit.errors import InvalidArgument
        from pjrtkit.stablehlo.loader import load_program
        code = open({os.path.join(DATA, name)!r}, "rb").read()
        for attempt in range(2):
            try:
                load_program(code, isolated=True)
                print("loaded")
            except InvalidArgument as exc:
                print("INVALID_ARGUMENT", exc.message)
        print("alive")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and lines[-1] == "alive", out.stderr[-2000:]
    assert all(line.startswith("INVALID_ARGUMENT") for line in lines[:-1]), lines
    if jaxlib.__version__ == "0.10.2":  # the version these crashes were found with
        assert all("crashed jaxlib's StableHLO parser" in line for line in lines[:-1]), lines


def test_the_same_program_crashes_a_process_that_parses_in_process():
    """The fixture really is a crasher: without isolation the process dies."""
    if jaxlib.__version__ != "0.10.2":
        pytest.skip(f"the crash was found with jaxlib 0.10.2, this is {jaxlib.__version__}")
    script = (f"from pjrtkit.stablehlo.loader import load_program\n"
              f"load_program(open({os.path.join(DATA, CRASHERS[0])!r}, 'rb').read())\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    assert out.returncode < 0, out.stderr[-2000:]


def test_isolated_and_in_process_loads_give_the_same_ir():
    code = portable_artifact(_program, np.ones((3, 4), np.float32), np.ones((4, 2), np.float32))
    isolated, local = load_program(code, isolated=True), load_program(code)
    assert [(op.name, [v.id for v in op.operands], [v.type for v in op.results])
            for op in walk_ops(isolated)] == [
        (op.name, [v.id for v in op.operands], [v.type for v in op.results])
        for op in walk_ops(local)]
    constants = [(op.attributes["value"].dtype, op.attributes["value"].tobytes())
                 for p in (isolated, local) for op in walk_ops(p)
                 if op.name == "stablehlo.constant"]
    assert constants[:len(constants) // 2] == constants[len(constants) // 2:]


def test_errors_keep_their_class_and_message():
    garbage = "func.func @main( {"
    with pytest.raises(InvalidArgument) as local:
        load_program(garbage)
    with pytest.raises(InvalidArgument) as isolated:
        load_program(garbage, isolated=True)
    assert isolated.value.message == local.value.message


def test_a_program_that_hangs_the_parser_is_stopped_and_invalid():
    """A damaged artifact that sends jaxlib's deserializer into an endless loop (found by the
    fuzz harness): the parse is stopped after PJRTKIT_PARSER_TIMEOUT_S."""
    path = os.path.join(DATA, "damaged_artifact_hangs_parser.mlirbc")
    script = textwrap.dedent(f"""
        import numpy as np
        from pjrtkit.errors import InvalidArgument
        from pjrtkit.stablehlo.loader import load_program
        from pjrtkit.testing.programs import portable_artifact
        try:
            load_program(open({path!r}, "rb").read(), isolated=True)
            print("loaded")
        except InvalidArgument as exc:
            print("INVALID_ARGUMENT", exc.message)
        program = load_program(portable_artifact(lambda x: x + 1, np.ones(2)), isolated=True)
        print("next parse", program.main.name)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PJRTKIT_PARSER_TIMEOUT_S": "5"})
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and lines[-1] == "next parse main", out.stderr[-2000:]
    assert lines[0].startswith("INVALID_ARGUMENT"), lines
    if jaxlib.__version__ == "0.10.2":  # the version this hang was found with
        assert "took longer than 5 s" in lines[0], lines


@pytest.mark.parametrize("isolated", ["1", "0"])
def test_the_parser_child_starts_and_warms_up_when_a_client_is_created(isolated):
    """Creating a client starts the child (its imports then overlap the user's program up to
    the first compile); the first compile talks to that same child. In-process parsing starts
    none."""
    script = textwrap.dedent("""
        import time
        import jax, numpy as np
        from pjrtkit.stablehlo import isolation
        x = jax.device_put(np.ones(3, np.float32), jax.devices("pjrtkit_cpu")[0])
        child = isolation._PARSER._child
        started = child is not None and child.poll() is None
        y = jax.jit(lambda v: v + 1)(x)
        same = isolation._PARSER._child is child
        print(started, same, float(y[0]))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "JAX_PLATFORMS": "pjrtkit_cpu",
                                           "PJRTKIT_ISOLATED_PARSER": isolated})
    assert out.returncode == 0, out.stderr[-2000:]
    expected = "True True 2.0" if isolated == "1" else "False True 2.0"
    assert out.stdout.split("\n")[-2] == expected, out.stdout


def test_work_asked_for_meanwhile_runs_once_on_the_requesting_thread_while_the_child_parses():
    """``isolation.while_the_child_works``: the task runs once, on the thread of the next
    request, while the child runs; a task that raises does not fail the parse. In a fresh
    interpreter, so that the child is started for this test."""
    script = textwrap.dedent("""
        import threading
        from pjrtkit.stablehlo import isolation
        from pjrtkit.stablehlo.loader import load_program
        from pjrtkit.testing.programs import portable_artifact
        import numpy as np
        def f(x):
            return x * 2.0 + 1.0
        code = portable_artifact(f, np.ones(3, np.float32))
        seen = []
        def task():
            seen.append((threading.get_ident(), isolation._PARSER._child.poll()))
        def broken():
            raise RuntimeError("a plugin's warm-up failed")
        isolation.while_the_child_works(broken)
        isolation.while_the_child_works(task)
        isolation.while_the_child_works(task)  # asked again before the request: run once
        load_program(code, isolated=True)  # too small a program to hide the task: left queued
        small = len(seen)
        isolation.MEANWHILE_MIN_BYTES = len(code)
        program = load_program(code, isolated=True)
        load_program(code, isolated=True)
        print(small, len(seen), seen[0][0] == threading.get_ident(), seen[0][1] is None,
              len(program.functions) > 0)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["0", "1", "True", "True", "True"], (out.stdout,
                                                                     out.stderr[-2000:])


@pytest.mark.parametrize("devices", ["1", "4"])
def test_a_client_of_several_devices_has_the_child_ready_the_partitioner(devices):
    """With several devices the child readies XLA's partitioner in the background at the
    client's first compile, not before (one warm request, answered at once, from a thread of
    its own: the plugin's meanwhile work is left to the compile's own request); a sharded
    program then partitions as before. One device asks for nothing."""
    script = textwrap.dedent("""
        import threading
        import jax, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from pjrtkit.stablehlo import isolation
        devices = jax.devices("pjrtkit_cpu")
        assert isolation._warmed[0] == 1  # a client alone asks for nothing
        seen = []
        isolation.MEANWHILE_MIN_BYTES = 0  # (this small program's request runs the task)
        isolation.while_the_child_works(lambda: seen.append(threading.current_thread().name))
        jax.jit(lambda v: v + 1)(jax.device_put(np.ones(3, np.float32), devices[0]))
        for thread in threading.enumerate():
            if thread.name == "pjrtkit-warm-partitioner":
                thread.join(120)
        mesh = Mesh(np.array(devices), ("x",))
        x = jax.device_put(np.arange(8.0, dtype=np.float32), NamedSharding(mesh, P("x")))
        total = jax.jit(lambda v: (v * 2).sum())(x)
        print(isolation._warmed[0], len(seen) == 1 and seen[0] != "pjrtkit-warm-partitioner",
              float(total))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "JAX_PLATFORMS": "pjrtkit_cpu",
                                           "PJRTKIT_CPU_DEVICES": devices,
                                           "PJRTKIT_ISOLATED_PARSER": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == f"{devices} True 56.0", (out.stdout, out.stderr[-2000:])
