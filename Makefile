# easlurm: the two Quickstart commands are `make demo` and `make test`.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
STAMP := .install.stamp

.PHONY: install demo test lint unit integration bench clean

# Debian packages (Slurm 22.05, munge, MariaDB, Open MPI) and the package with its test extras; idempotent.
install: $(STAMP)
$(STAMP): pyproject.toml
	scripts/slurm-box install
	# torch pinned first: 2.13.0 is the CPU build this platform provides; an unpinned torch pulls CUDA wheels
	$(PIP) install --quiet --disable-pip-version-check "torch==2.13.0"
	$(PIP) install --quiet --disable-pip-version-check -e ".[dev,mpi,torch]"
	@touch $(STAMP)

demo: install
	scripts/demo

lint: install
	ruff format --check src tests $(wildcard benchmarks)
	ruff check src tests $(wildcard benchmarks)
	mypy

# The whole suite: lint, type check, unit tests and the integration tests against the real local Slurm.
test: lint
	$(PYTHON) -m pytest

unit: install
	$(PYTHON) -m pytest tests/unit

bench: install
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PYTHON) $$b || exit 1; done

clean:
	-scripts/slurm-box down
	rm -rf .slurm-box $(STAMP) build src/*.egg-info
