# Every target creates or reuses .venv itself: on a fresh machine `make demo`
# and `make test` are the only commands a new user needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo demo-local test test-fast lint bench docs venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -e '.[test,experiments]'
	@touch $(STAMP)

# A coordinator and 3 site daemons as processes on 127.0.0.1, mutual TLS and
# secure aggregation, on the bundled UCI Adult split.
# Single-threaded BLAS: the coordinator-side source-only fit shares 2 cores
# with 4 daemons, and OpenBLAS's busy-waiting threads made it 50 s instead of
# 1.5 s under load (common/blas_threads.py).
demo: $(STAMP)
	@OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/privadapt simulate --sites 3

# The same algorithms with the sites in this process (LocalFederation).
demo-local: $(STAMP)
	@$(BIN)/python experiments/demo.py

# The whole suite on every core (pytest-xdist, -n auto); workstealing evens
# out the long statistical and end-to-end tests between workers. One BLAS
# thread per worker: n workers each starting n OpenBLAS threads on the same
# cores only busy-wait against each other (see demo above).
PYTEST := OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
	$(BIN)/python -m pytest -n auto --dist worksteal

test: $(STAMP)
	@$(PYTEST) -q --durations=30

# The same without the tests marked slow (each over about 10 s on its own).
test-fast: $(STAMP)
	@$(PYTEST) -q -m "not slow"

lint: $(STAMP)
	@$(BIN)/ruff check .

bench: $(STAMP)
	@$(BIN)/python benchmarks/run.py
	@$(BIN)/python benchmarks/secagg.py
	@$(BIN)/python benchmarks/network_round.py
	@$(BIN)/python benchmarks/pcnvx_adap.py
	@$(BIN)/python benchmarks/discrete_noise.py
	@$(BIN)/python benchmarks/ledger_charges.py
	@$(BIN)/python benchmarks/dp_frank_wolfe.py

# The documentation site in site/ (MkDocs, Material theme), warnings as
# errors: a broken link, a page missing from the navigation or an API name
# that does not resolve fails the build. Its tools are the `docs` extra,
# installed into the same venv on first use.
DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(STAMP)
	@$(BIN)/python -m pip install --quiet -e '.[docs]'
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	@NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info site
