# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Each creates .venv and installs the pinned dependencies when missing.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.pjrtkit-installed

.PHONY: demo test install bench conformance clean jax-tests-env jax-tests jax-tests-ci

$(STAMP): pyproject.toml setup.py constraints.txt plugins/cpu/pyproject.toml core/pjrtkit/abi/_build.py $(wildcard core/pjrtkit/abi/*.h)
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (Python 3.11) on PATH, or run: make PYTHON=/path/to/python3.11"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=24" -c constraints.txt
	$(BIN)/python -m pip install -q -c constraints.txt setuptools wheel cffi
	$(BIN)/python -m pip install -q -c constraints.txt --no-build-isolation -e '.[test]'
	$(BIN)/python -m pip install -q -c constraints.txt --no-build-isolation -e plugins/cpu
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/mlp_train.py --steps 20

# The conformance reports first, then pytest, whose summary line closes the output.
test: $(STAMP)
	$(MAKE) --no-print-directory conformance
	$(BIN)/python -m pytest -q -p no:cacheprovider

# The conformance suite on every plugin in the repository; reports in build/conformance/
# (git-ignored). Fails when any check FAILs.
PLUGINS := $(notdir $(patsubst %/,%,$(dir $(wildcard plugins/*/pyproject.toml))))

conformance: $(STAMP)
	@mkdir -p build/conformance
	@for plugin in $(PLUGINS); do \
		echo "conformance suite: $$plugin"; \
		$(BIN)/pjrtkit conformance $$plugin --quiet --json build/conformance/$$plugin.json \
			--markdown build/conformance/$$plugin.md || exit 1; \
	done

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# JAX's own tests (pjrtkit jax-tests) need pytest<9 and JAX's test requirements, so they run in
# their own environment, .venv-jaxtests: the project's pins (constraints.txt without its pytest
# pin) plus constraints-jaxtests.txt. The test files come from a JAX source tree of the pinned
# version: JAX_TESTS_DIR (default: ../shared/jax-tests or ../../shared/jax-tests). Nothing is
# fetched from it.
JT_VENV := .venv-jaxtests
JT_BIN := $(JT_VENV)/bin
JT_STAMP := $(JT_VENV)/.pjrtkit-installed
JT_REQUIREMENTS := pytest pytest-xdist absl-py cloudpickle filelock flatbuffers hypothesis \
	mpmath pillow portpicker rich
JAX_TESTS_DIR ?= $(firstword $(wildcard ../shared/jax-tests ../../shared/jax-tests))
JAX_TESTS_ARGS ?=
JAX_TESTS_EXPECTED ?= tests/jax_suite/expected_passes_jax-v0.10.2.txt

$(JT_STAMP): $(STAMP) constraints-jaxtests.txt
	test -x $(JT_BIN)/python || $(PYTHON) -m venv $(JT_VENV)
	grep -v '^pytest==' constraints.txt > $(JT_VENV)/constraints-project.txt
	$(JT_BIN)/python -m pip install -q --upgrade "pip>=24" -c $(JT_VENV)/constraints-project.txt
	$(JT_BIN)/python -m pip install -q -c $(JT_VENV)/constraints-project.txt setuptools wheel cffi
	$(JT_BIN)/python -m pip install -q -c $(JT_VENV)/constraints-project.txt \
		-c constraints-jaxtests.txt --no-build-isolation -e . -e plugins/cpu $(JT_REQUIREMENTS)
	touch $(JT_STAMP)

jax-tests-env: $(JT_STAMP)

# The long measurement: the 12 files of issue 9 (x64 off), then lax, linalg and fft with x64;
# reports in build/jax-tests/. Hours on two cores. JAX_TESTS_ARGS adds options (--files ...).
jax-tests: $(JT_STAMP)
	$(JT_BIN)/pjrtkit jax-tests --jax-tests "$(JAX_TESTS_DIR)" --json build/jax-tests/x64-off.json \
		$(JAX_TESTS_ARGS)
	$(JT_BIN)/pjrtkit jax-tests --jax-tests "$(JAX_TESTS_DIR)" --x64 --files \
		lax_test,linalg_test,fft_test --json build/jax-tests/x64-on.json $(JAX_TESTS_ARGS)

# CI's short form: the expected-pass list on pjrtkit_cpu (a few minutes); fails when a listed
# test fails or a worker dies.
jax-tests-ci: $(JT_STAMP)
	$(JT_BIN)/pjrtkit jax-tests --jax-tests "$(JAX_TESTS_DIR)" --expected-passes $(JAX_TESTS_EXPECTED)

clean:
	rm -rf $(VENV) $(JT_VENV) build core/*.egg-info plugins/*/*.egg-info core/pjrtkit/abi/_pjrt_cffi*
