"""Run JAX's own test files against a pjrtkit backend and against XLA's CPU backend.

JAX's test suite is the widest description of what a JAX backend must do. This package runs named
test files of a JAX source tree twice, once with the backend as JAX's default platform and once
on XLA's CPU backend, compares the per-test outcomes, and groups the backend's failures by cause,
so the breadth work has a worklist and CI has a list of tests that must keep passing.

Modules, one responsibility each:
    device_tag      which device tag (``jax_test_dut``) a backend is tested as
    pytest_plugin   loaded into the pytest that runs JAX's tests: sets the tag, records outcomes
    outcomes        reads the recorded outcomes of one pytest run
    causes          a failure message -> the normalised cause it is grouped under
    compare         the reference run and the backend run of one file -> one comparison
    runner          builds and runs the two pytest commands per file
    expected        the expected-pass list CI checks
    report          the per-file table, the top causes, JSON
    command         the ``pjrtkit jax-tests`` sub-command
"""
