# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Each creates the virtual environment and installs the pinned dependencies when missing.
#
# JAX picks the pinned set: empty (default) is constraints.txt (jax 0.10.2, Python 3.11, in
# .venv); JAX=0.11 or JAX=0.12 is constraints-jax$(JAX).txt (Python 3.12 or 3.13) in its own
# .venv-jax$(JAX)-<python>, so every set can live beside the others. PYTHON picks the interpreter.
JAX ?=
ifeq ($(strip $(JAX)),)
PYTHON ?= python3.11
CONSTRAINTS := constraints.txt
VENV ?= .venv
else
PYTHON ?= python3.12
CONSTRAINTS := constraints-jax$(JAX).txt
VENV ?= .venv-jax$(JAX)-$(notdir $(PYTHON))
endif
# TRITON=3.6.0 (any version pjrtkit-gpu accepts) installs the same pinned set with that Triton
# instead of the pinned one, in its own $(VENV)-triton$(TRITON): `make gpu-compile-report
# TRITON=3.6.0` checks that the kernels build with the GPU test machine's Triton.
TRITON ?=
ifneq ($(strip $(TRITON)),)
VENV := $(VENV)-triton$(TRITON)
PIP_CONSTRAINTS := $(VENV)/constraints-triton.txt
else
PIP_CONSTRAINTS := $(CONSTRAINTS)
endif
BIN := $(VENV)/bin
STAMP := $(VENV)/.pjrtkit-installed
# The gloo engine (pjrtkit[gloo]: torch.distributed) for jobs of several processes. torch is
# installed on the default set only, as the CPU build (the local version +cpu never matches
# PyPI's CUDA build of several GB), without its dependencies' pins (it asks setuptools>=77.0.3,
# which only its C++ extension builder uses; constraints.txt pins 75.8.0). Where no such wheel
# can be had the step says so and goes on: tests that need the engine then skip, naming it.
GLOO_TORCH ?= $(if $(strip $(JAX)),,torch==2.13.0+cpu)
define install_gloo
	$(if $(strip $(GLOO_TORCH)),$(1)/python -m pip install -q -c constraints.txt typing-extensions filelock && \
	{ $(1)/python -m pip install -q --no-deps --only-binary=:all: "$(GLOO_TORCH)" || \
	  echo "note: $(GLOO_TORCH) is not available here; the gloo engine is not installed"; })
endef
SETS := $(patsubst constraints-jax%.txt,%,$(wildcard constraints-jax*.txt))

.PHONY: test-long test-long-sweeps test-long-runs test-many-processes demo test lint install wheels bench accuracy dtype-sweep conformance conformance-pages gpu-compile-report gpu-device-check gpu-device-carry fuzz soak clean jax-tests-env jax-tests jax-tests-all jax-tests-ci jax-tests-multiprocess

# Every plugin in the repository (a directory under plugins/ with a pyproject.toml) is installed
# and measured by `make conformance`; the cpu plugin first, since others may import it. The
# shared GPU lowering (gpu/, pjrtkit-gpu) is not a plugin: it is installed before them.
PLUGINS := cpu $(filter-out cpu,$(sort $(notdir $(patsubst %/,%,$(dir $(wildcard plugins/*/pyproject.toml))))))

$(STAMP): pyproject.toml setup.py tools/pyproject.toml $(CONSTRAINTS) gpu/pyproject.toml $(wildcard plugins/*/pyproject.toml) core/pjrtkit/abi/_build.py $(wildcard core/pjrtkit/abi/*.h) core/pjrtkit/elementwise_vm/_build.py core/pjrtkit/elementwise_vm/vm.c core/pjrtkit/elementwise_vm/spellings.py core/pjrtkit/elementwise_vm/float32_source.h
	@$(PYTHON) -c "" >/dev/null 2>&1 || { echo "cannot run $(PYTHON); run: make PYTHON=/path/to/python$(if $(JAX),3.12,3.11)$(if $(JAX), JAX=$(JAX))"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(if $(strip $(TRITON)),sed 's/^triton==.*/triton==$(TRITON)/' $(CONSTRAINTS) > $(PIP_CONSTRAINTS))
	$(BIN)/python -m pip install -q --upgrade "pip>=24" -c $(PIP_CONSTRAINTS)
	$(BIN)/python -m pip install -q -c $(PIP_CONSTRAINTS) setuptools wheel cffi
	$(BIN)/python -m pip install -q -c $(PIP_CONSTRAINTS) --no-build-isolation -e tools -e '.[dev,bench]'
	$(BIN)/python -m pip install -q -c $(PIP_CONSTRAINTS) --no-build-isolation -e 'gpu[cuda,rocm,cuda-libraries,rocm-libraries]'
	for plugin in $(PLUGINS); do \
		$(BIN)/python -m pip install -q -c $(PIP_CONSTRAINTS) --no-build-isolation -e plugins/$$plugin || exit 1; \
	done
	$(call install_gloo,$(BIN))
	touch $(STAMP)

$(CONSTRAINTS):
	@echo "no pinned set $(CONSTRAINTS): JAX= (empty, jax 0.10.2) or one of: $(SETS)"; exit 1

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/mlp_train.py --steps 20

# The conformance reports first, then pytest, whose summary line closes the output; the tests
# that read a whole-suite report read the one just written (PJRTKIT_TEST_CONFORMANCE_REPORTS)
# instead of running the suite a second time.
# pytest on TEST_WORKERS processes (pytest-xdist; 2 = the CI machine's cores, 0 = one process).
TEST_WORKERS ?= 2
# make test runs the whole conformance suite on the cpu plugin (tests read its report) and, on the
# other plugins, their C ABI and hook layers and the JAX layer's training programs
# (CONFORMANCE_NARROW_ARGS): the tpu suite takes minutes and the GPU plugins' JAX layer runs on
# Triton's interpreter. `make conformance` (its own CI step) runs every plugin whole.
# Tests marked `long` (whole example trainings, the faulty-backend conformance run, the benchmark
# smoke run, short soak and fuzz campaigns, the 2- and 8-device program runs, the semantics'
# every-op-and-dtype reach check, the native loop with random bits in branches, the
# hanging-backend and lost-process runs, and the rest of the slow parametrized sweeps, of which
# make test keeps a representative part: tests/expansion_support.py's diagonal_sweep,
# plugins/cpu/tests/dtype_sample.py) are left to `make test-long`, which CI runs.
# `--dist loadgroup`: a module marked with an xdist_group runs on one worker (its module fixture
# starts child interpreters once); it needs a pytest / pytest-xdist pair that still groups
# (pytest 9.2 with xdist 3.8 does not: the constraints pin 9.1.1; tests/test_xdist_groups.py).
PYTEST_RUN = $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup
test: $(STAMP)
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory conformance CONFORMANCE_NARROWED="$(filter-out cpu,$(PLUGINS))"
	PJRTKIT_TEST_CONFORMANCE_REPORTS=$(CURDIR)/build/conformance $(PYTEST_RUN) -m "not long and not many_processes"

test-long: $(STAMP)
	$(PYTEST_RUN) -m "long and not many_processes"

# The part of make test-long that is the rest of a parametrized sweep (mark long_sweep, set by
# conftest.py): every dtype, shape and device count that make test samples. CI runs it on the
# newest JAX set, where the lowering differs; make test-long (all of it) runs on the pinned set.
test-long-sweeps: $(STAMP)
	$(PYTEST_RUN) -m "long_sweep and not many_processes"

# The rest of make test-long: its end-to-end runs (trainings, wheels, faulty and broken backends,
# benchmark smoke, GPU device check, lost processes). CI runs it on the pinned set, so that each
# long test runs once per CI run (make test-long-sweeps on the newest set, this on the pinned).
test-long-runs: $(STAMP)
	$(PYTEST_RUN) -m "long and not long_sweep and not many_processes"

# Jobs of 4 processes per backend (tests/distributed: every collective and dtype, the
# multi-process example); CI runs the 2-process ones (make test, make test-long).
test-many-processes: $(STAMP)
	$(PYTEST_RUN) -m many_processes

# The lint floor: ruff with the rules in pyproject.toml (import cycles and private imports are
# tests/test_import_graph.py, run with the tests).
lint: $(STAMP)
	$(BIN)/ruff check .

# The conformance suite on every plugin in the repository, CONFORMANCE_JOBS plugins at a time;
# reports in build/conformance/<plugin>.json, .md, .out (the printed summary) and .err
# (git-ignored). Fails when any check FAILs. The GPU plugins (cuda, rocm) run emulated
# (PJRTKIT_GPU_EMULATE=1: Triton's interpreter on host memory) unless GPU_EMULATE=0 is given,
# for a machine with the GPU. The plugins in CONFORMANCE_NARROWED run only
# CONFORMANCE_NARROW_ARGS (make test narrows every plugin but cpu).
GPU_PLUGINS := cuda rocm
GPU_EMULATE ?= 1
CONFORMANCE_JOBS ?= 2
# Each whole run deals its JAX layer over CONFORMANCE_CHECK_JOBS child processes (pjrtkit
# conformance --jobs): the emulated cuda suite is 18 minutes of one core otherwise. A narrowed
# run (a few JAX checks) stays in one process.
CONFORMANCE_CHECK_JOBS ?= 2
CONFORMANCE_NARROWED ?=
CONFORMANCE_NARROW_ARGS ?= --check abi. hooks. jax.program.
conformance: $(STAMP)
	@mkdir -p build/conformance
	@$(MAKE) --no-print-directory -j$(CONFORMANCE_JOBS) $(addprefix conformance-,$(PLUGINS))

conformance-%: $(STAMP)
	@case " $(GPU_PLUGINS) " in *" $* "*) emulate=$(GPU_EMULATE);; *) emulate=0;; esac; \
	case " $(CONFORMANCE_NARROWED) " in *" $* "*) extra='$(CONFORMANCE_NARROW_ARGS)'; jobs=1;; \
		*) extra=; jobs=$(CONFORMANCE_CHECK_JOBS);; esac; \
	PJRTKIT_GPU_EMULATE=$$emulate $(BIN)/pjrtkit conformance $* --quiet --jobs $$jobs \
		--json build/conformance/$*.json --markdown build/conformance/$*.md $$extra \
		> build/conformance/$*.out 2> build/conformance/$*.err \
		|| { echo "conformance suite: $* FAILED"; cat build/conformance/$*.out build/conformance/$*.err; exit 1; }; \
	echo "conformance suite: $*$${extra:+ ($$extra)}"; cat build/conformance/$*.out

# The committed conformance pages against the whole runs `make conformance` just wrote (CI runs
# it after the whole cuda run): exit 1 naming each check whose outcome differs.
conformance-pages: $(STAMP)
	$(BIN)/python -m pjrtkit_tools.conformance_pages --report build/conformance/cuda.json \
		--page docs/conformance-cuda-emulated.md

# Every kernel the GPU lowering can emit, for each dtype it takes, compiled ahead of time for
# sm_80, sm_90, sm_100, gfx90a, gfx942 and gfx1100 with its binary size (no GPU needed; CI runs
# it). GPU_COMPILE_JOBS compiles in parallel. Report in build/gpu-compile-report.{json,md}.
GPU_COMPILE_JOBS ?= 2
gpu-compile-report: $(STAMP)
	@mkdir -p build
	env -u PJRTKIT_GPU_EMULATE -u TRITON_INTERPRET $(BIN)/python -m pjrtkit_gpu.compile_report \
		--jobs $(GPU_COMPILE_JOBS) --json build/gpu-compile-report.json \
		--markdown build/gpu-compile-report.md \
		$(if $(strip $(GPU_COMPILE_TARGETS)),--targets $(GPU_COMPILE_TARGETS))

# The GPU device check (tools/pjrtkit_tools/gpu_device_check; README, "The GPU device check").
# GPU_EMULATE=0, on the GPU test machine: the machine's python3 (DEVICE_CHECK_PYTHON) with the
# carried wheels on PYTHONPATH, results in $(OUT), within 360 s (the vendor stage, cuBLAS, last).
# GPU_EMULATE=1 (the default), here: the same stages emulated, in this set's venv
# (`make JAX=0.11 PYTHON=... gpu-device-check` is the baseline), results in
# build/gpu-device-check/out, within 30 minutes; the kernels it launches are recorded for
# gpu-device-carry.
DEVICE_CHECK_PYTHON ?= python3
GPU_CARRY ?= .gpu-check
GPU_CARRY_TRITON ?= 3.6.0
ifeq ($(strip $(GPU_EMULATE)),0)
gpu-device-check:
	$(DEVICE_CHECK_PYTHON) -m pjrtkit_tools.gpu_device_check --out "$(if $(OUT),$(OUT),build/gpu-device-check/out)" --carry $(GPU_CARRY)
else
gpu-device-check: $(STAMP)
	$(BIN)/python -m pjrtkit_tools.gpu_device_check --emulate --out build/gpu-device-check/out
endif

# What travels to the GPU test machine, in $(GPU_CARRY) (git-ignored): pjrtkit's wheels for
# this set's Python (JAX=0.11: 3.12, the machine's), the wheels the machine lacks, the kernels
# the emulated device check recorded, compiled for sm_90 with Triton $(GPU_CARRY_TRITON) (its
# own venv) into Triton's cache; prints the device tool's command (also in run-command.txt).
gpu-device-carry: $(STAMP)
	@test -d build/gpu-device-check/kernel-log || { echo "run the emulated device check first: make JAX=0.11 PYTHON=... gpu-device-check"; exit 1; }
	$(MAKE) --no-print-directory TRITON=$(GPU_CARRY_TRITON) install
	$(MAKE) --no-print-directory wheels WHEELS_DIR=$(GPU_CARRY)/wheels
	$(BIN)/python -m pjrtkit_tools.gpu_device_check.carry --folder $(GPU_CARRY) \
		--constraints $(CONSTRAINTS) --compile-python $(VENV)-triton$(GPU_CARRY_TRITON)/bin/python \
		--jobs $(GPU_COMPILE_JOBS)

# Every distribution as a wheel in WHEELS_DIR: the core (its C extension built for this
# interpreter), the development tools (tools/, not published), the shared GPU lowering (gpu/)
# and each plugin. setuptools' own build folders are removed first, so a wheel never carries a
# module that left the tree. `make JAX=0.12 wheels` builds them for Python 3.12.
WHEELS_DIR ?= dist
wheels: $(STAMP)
	rm -rf $(WHEELS_DIR) build/lib build/lib.* build/bdist.* build/temp.* \
		$(addsuffix /build,tools gpu $(addprefix plugins/,$(PLUGINS)))
	mkdir -p $(WHEELS_DIR)
	$(BIN)/python -m pip wheel -q --no-deps --no-build-isolation -w $(WHEELS_DIR) \
		./ ./tools ./gpu $(addprefix ./plugins/,$(PLUGINS))
	@ls $(WHEELS_DIR)

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# Transcendental accuracy of every pjrtkit_cpu path and of XLA's CPU backend against float64
# (a few minutes; not part of make test): regenerates docs/accuracy.md.
accuracy: $(STAMP)
	$(BIN)/python -m pjrtkit_cpu.accuracy --markdown docs/accuracy.md

# Every lax op over every dtype on pjrtkit_cpu vs XLA's CPU backend (long; make test runs a
# sample, plugins/cpu/tests/test_dtype_sweep.py).
dtype-sweep: $(STAMP)
	JAX_PLATFORMS=pjrtkit_cpu,cpu $(BIN)/python -m pjrtkit_tools.dtype_sweep --modes jit,loop,big

# The fuzz harnesses, each batch of cases in a child process (an abort is counted, not fatal);
# each prints cases, aborts and bugs per target and fails on any abort or bug.
# Programs: FUZZ_CASES per target (damaged artifacts, mutated ops, random constants; about a
# minute per 500 on this 2-core machine, so the default 10,000 is about 20 minutes a target).
# The C ABI: FUZZ_ABI_CASES per target (random Args, handle lifetimes), FUZZ_CASES unless given.
# CI's `make fuzz FUZZ_CASES=500` is the short form of both.
FUZZ_CASES ?= 10000
FUZZ_ABI_CASES ?= $(FUZZ_CASES)
FUZZ_SEED ?= 0
fuzz: $(STAMP)
	@mkdir -p build
	$(BIN)/python -m pjrtkit_tools.fuzz_programs --cases $(FUZZ_CASES) --seed $(FUZZ_SEED) \
		--json build/fuzz.json
	$(BIN)/python -m pjrtkit_tools.fuzz_abi --cases $(FUZZ_ABI_CASES) --seed $(FUZZ_SEED) \
		--json build/fuzz_abi.json

# The leak soak (not in `make test`): executes, transfers and compiles of distinct programs on
# pjrtkit_cpu with fusion on, as users run it; RSS slope per 10k operations, live handle counts
# and cache sizes; fails past 1 MiB per 10k, when handles do not come back or a cache passes its
# bound. The defaults are issue 13's bar (the compiles take longest). Niced: it runs for long.
SOAK_EXECUTES ?= 100000
SOAK_TRANSFERS ?= 100000
SOAK_COMPILES ?= 10000
soak: $(STAMP)
	@mkdir -p build
	nice -n 10 $(BIN)/python -m pjrtkit_tools.soak --executes $(SOAK_EXECUTES) \
		--transfers $(SOAK_TRANSFERS) --compiles $(SOAK_COMPILES) --json build/soak.json

# JAX's own tests (pjrtkit jax-tests) need pytest<9 and JAX's test requirements, so they run in
# their own environment, .venv-jaxtests: the project's pins (constraints.txt without its pytest
# pin) plus constraints-jaxtests.txt. The test files come from a JAX source tree of the pinned
# version: JAX_TESTS_DIR (default: ../shared/jax-tests or ../../shared/jax-tests). Nothing is
# fetched from it.
# JAX=0.11 (or 0.12): the same for that pinned set, in .venv-jaxtests-jax0.11-<python>, with the
# JAX test tree of that line (../shared/jax-tests-0.11.0 for 0.11).
JT_VENV := $(if $(strip $(JAX)),.venv-jaxtests-jax$(JAX)-$(notdir $(PYTHON)),.venv-jaxtests)
JT_BIN := $(JT_VENV)/bin
JT_STAMP := $(JT_VENV)/.pjrtkit-installed
JT_REQUIREMENTS := pytest pytest-xdist absl-py cloudpickle filelock flatbuffers hypothesis \
	mpmath pillow portpicker rich
JT_TREE := jax-tests$(if $(strip $(JAX)),-$(JAX).*)
JAX_TESTS_DIR ?= $(firstword $(wildcard ../shared/$(JT_TREE) ../../shared/$(JT_TREE)))
JAX_TESTS_ARGS ?=
JAX_TESTS_EXPECTED ?= tests/jax_suite/expected_passes_jax-v0.10.2.txt

$(JT_STAMP): $(STAMP) constraints-jaxtests.txt gpu/pyproject.toml tools/pyproject.toml
	test -x $(JT_BIN)/python || $(PYTHON) -m venv $(JT_VENV)
	grep -v '^pytest==' $(CONSTRAINTS) > $(JT_VENV)/constraints-project.txt
	$(JT_BIN)/python -m pip install -q --upgrade "pip>=24" -c $(JT_VENV)/constraints-project.txt
	$(JT_BIN)/python -m pip install -q -c $(JT_VENV)/constraints-project.txt setuptools wheel cffi
	$(JT_BIN)/python -m pip install -q -c $(JT_VENV)/constraints-project.txt \
		-c constraints-jaxtests.txt --no-build-isolation -e . -e tools -e gpu $(addprefix -e plugins/,$(PLUGINS)) $(JT_REQUIREMENTS)
	$(call install_gloo,$(JT_BIN))
	touch $(JT_STAMP)

jax-tests-env: $(JT_STAMP)

# The long measurement: the 12 files of issue 9 (x64 off), then lax, linalg and fft with x64;
# reports in build/jax-tests/. Hours on two cores. JAX_TESTS_ARGS adds options (--files ...).
jax-tests: $(JT_STAMP)
	$(JT_BIN)/pjrtkit jax-tests --jax-tests "$(JAX_TESTS_DIR)" --json build/jax-tests/x64-off.json \
		$(JAX_TESTS_ARGS)
	$(JT_BIN)/pjrtkit jax-tests --jax-tests "$(JAX_TESTS_DIR)" --x64 --files \
		lax_test,linalg_test,fft_test --json build/jax-tests/x64-on.json $(JAX_TESTS_ARGS)

# JAX's whole suite (pjrtkit jax-tests --all), x64 off then on, with JAX_PLATFORMS=<backend>
# alone, resumable file by file: XLA's pass lists in tests/jax_suite/xla_passes/ (once per tree
# and configuration), the backend's records in tests/jax_suite/records/ (commit both as they
# grow). Many hours on two cores; JAX_TESTS_ARGS adds options (--backend tpu, --files ...).
jax-tests-all: $(JT_STAMP)
	$(JT_BIN)/pjrtkit jax-tests --all --alone --jax-tests "$(JAX_TESTS_DIR)" \
		--json build/jax-tests/all-x64-off.json $(JAX_TESTS_ARGS)
	$(JT_BIN)/pjrtkit jax-tests --all --alone --x64 --jax-tests "$(JAX_TESTS_DIR)" \
		--json build/jax-tests/all-x64-on.json $(JAX_TESTS_ARGS)

# CI's short form: the expected-pass list on pjrtkit_cpu (a few minutes); fails when a listed
# test fails or a worker dies. Then JAX's multi-process tests in their short form (2 processes,
# the files that pass whole, pjrtkit_cpu only; fails on any failure or a process ended by a
# signal).
jax-tests-ci: $(JT_STAMP)
	$(JT_BIN)/pjrtkit jax-tests --jax-tests "$(JAX_TESTS_DIR)" --expected-passes $(JAX_TESTS_EXPECTED)
	$(JT_BIN)/pjrtkit jax-tests --jax-tests "$(JAX_TESTS_DIR)" --multiprocess --short

# JAX's multi-process tests (tests/multiprocess, the eight files of issue 24) under JAX's own
# harness with 4 processes, on pjrtkit_cpu and XLA's cpu: the table and each failure's cause.
jax-tests-multiprocess: $(JT_STAMP)
	$(JT_BIN)/pjrtkit jax-tests --jax-tests "$(JAX_TESTS_DIR)" --multiprocess \
		--json build/jax-tests/multiprocess.json $(JAX_TESTS_ARGS)

clean:
	rm -rf .venv .venv-jax* build core/*.egg-info gpu/*.egg-info tools/*.egg-info plugins/*/*.egg-info core/pjrtkit/abi/_pjrt_cffi* core/pjrtkit/elementwise_vm/_vm_cffi*
