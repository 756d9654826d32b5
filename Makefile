# easlurm: the two Quickstart commands are `make demo` and `make test`.
# Everything Python lives in a virtual environment inside the checkout (.venv); nothing goes into the
# system Python (Debian's is externally managed, PEP 668). Its bin/ comes first on PATH for every recipe,
# so the demo, the tests, the local cluster's scripts and the SPANK plugin's agent line use its python3.
VENV ?= .venv
PYTHON := $(abspath $(VENV))/bin/python3
PIP := $(PYTHON) -m pip
STAMP := .install.stamp
EXTRAS ?= dev,mpi
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: install demo test lint unit integration bench clean

# Debian packages (the release's Slurm, munge, MariaDB, Open MPI, compilers, python3-venv), then the virtual
# environment with easlurm and its test extras. Idempotent: the stamp is keyed on pyproject.toml.
# torch is not among the extras installed here: from the package index it is the CUDA build (gigabytes);
# `make install EXTRAS=dev,mpi,torch` (or `pip install 'easlurm[torch]'`) adds it, and its tests then run.
install: $(STAMP)
$(STAMP): pyproject.toml
	scripts/slurm-box install
	$(PIP) --version >/dev/null 2>&1 || python3 -m venv --clear $(VENV)
	$(PIP) install --quiet --disable-pip-version-check -e ".[$(EXTRAS)]"
	@touch $(STAMP)

demo: install
	scripts/demo

lint: install
	ruff format --check src tests $(wildcard benchmarks)
	ruff check src tests $(wildcard benchmarks)
	mypy

# The whole suite: lint, type check, unit tests and the integration tests against the real local Slurm.
# Two lanes at once: the `slurm` tests in order (they share one cluster), and beside them the unit and docs
# tests (their output is printed when both are done); TEST_LANES=1 runs everything in one pytest.
TEST_LANES ?= 2
UNIT_LOG := .test-unit-lane.log
test: lint
ifeq ($(TEST_LANES),1)
	$(PYTHON) -m pytest
else
	@EASLURM_TEST_LANE=unit $(PYTHON) -m pytest -m "not slurm" -p no:cacheprovider \
		--basetemp=/tmp/easlurm-unit-lane >$(UNIT_LOG) 2>&1 & unit=$$!; \
	$(PYTHON) -m pytest -m slurm; slurm_rc=$$?; \
	wait $$unit; unit_rc=$$?; \
	echo "== the unit and docs lane (run beside the Slurm tests above): exit $$unit_rc"; cat $(UNIT_LOG); \
	echo "== make test: slurm lane exit $$slurm_rc, unit lane exit $$unit_rc"; \
	[ $$slurm_rc -eq 0 ] && [ $$unit_rc -eq 0 ]
endif

unit: install
	$(PYTHON) -m pytest tests/unit

bench: install
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PYTHON) $$b || exit 1; done

clean:
	-scripts/slurm-box down
	rm -rf .slurm-box $(STAMP) build src/*.egg-info
