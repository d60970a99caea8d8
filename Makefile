# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Each creates .venv and installs the pinned dependencies when missing.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.pjrtkit-installed

.PHONY: demo test install bench conformance fuzz clean

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
	rm -rf $(VENV) build core/*.egg-info plugins/*/*.egg-info core/pjrtkit/abi/_pjrt_cffi*
