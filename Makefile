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
BIN := $(VENV)/bin
STAMP := $(VENV)/.pjrtkit-installed
SETS := $(patsubst constraints-jax%.txt,%,$(wildcard constraints-jax*.txt))

.PHONY: demo test install bench conformance fuzz clean

$(STAMP): pyproject.toml setup.py $(CONSTRAINTS) plugins/cpu/pyproject.toml core/pjrtkit/abi/_build.py $(wildcard core/pjrtkit/abi/*.h)
	@$(PYTHON) -c "" >/dev/null 2>&1 || { echo "cannot run $(PYTHON); run: make PYTHON=/path/to/python$(if $(JAX),3.12,3.11)$(if $(JAX), JAX=$(JAX))"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=24" -c $(CONSTRAINTS)
	$(BIN)/python -m pip install -q -c $(CONSTRAINTS) setuptools wheel cffi
	$(BIN)/python -m pip install -q -c $(CONSTRAINTS) --no-build-isolation -e '.[test]'
	$(BIN)/python -m pip install -q -c $(CONSTRAINTS) --no-build-isolation -e plugins/cpu
	touch $(STAMP)

$(CONSTRAINTS):
	@echo "no pinned set $(CONSTRAINTS): JAX= (empty, jax 0.10.2) or one of: $(SETS)"; exit 1

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

# The program fuzz harness: FUZZ_CASES cases per target (damaged artifacts, mutated ops, random
# constants), each batch in a child process; prints cases, aborts and bugs per target and
# fails on any abort or bug. 500 per target is the CI form (about a minute per target).
FUZZ_CASES ?= 500
FUZZ_SEED ?= 0
fuzz: $(STAMP)
	@mkdir -p build
	$(BIN)/python -m pjrtkit.testing.fuzz_programs --cases $(FUZZ_CASES) --seed $(FUZZ_SEED) \
		--json build/fuzz.json

clean:
	rm -rf .venv .venv-jax* build core/*.egg-info plugins/*/*.egg-info core/pjrtkit/abi/_pjrt_cffi*
