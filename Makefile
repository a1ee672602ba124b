# The two commands of the README: `make demo` and `make test`. Both set up first.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint bench schemas docs

setup:
	@./scripts/setup

# The example's hosting clusters (its kubernetes manager) do not exist on a demo machine,
# so the demo drives the OVN manager only, against the embedded Northbound database.
demo: setup
	$(BIN)/unet validate examples/network-repo
	$(BIN)/unet apply examples/network-repo --manager ovn --auto-approve
	$(BIN)/unet plan examples/network-repo --manager ovn
	$(BIN)/unet show usage examples/network-repo --manager ovn
	$(BIN)/unet show status examples/network-repo --manager ovn --tenant acme

test: setup
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

# The benchmark (docs/performance.md): 100, 1,000 and 3,000 tenants; BENCH_ARGS for more
# (e.g. BENCH_ARGS="--sizes 100,1000 --work /tmp/unet-bench --markdown figures.md").
bench: setup
	@$(BIN)/python -c "import check_jsonschema, pyinstrument" 2>/dev/null || \
		$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test,bench]'
	$(BIN)/python -m benchmarks.bench $(BENCH_ARGS)

schemas: setup
	$(BIN)/unet schema

docs: setup
	$(BIN)/unet codes --markdown > docs/codes.md
