# The two commands of the README: `make demo` and `make test`. Both set up first.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint bench schemas docs

setup:
	@./scripts/setup

demo: setup
	$(BIN)/unet validate examples/network-repo

test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python -m reconciler.bench

schemas: setup
	$(BIN)/unet schema

docs: setup
	$(BIN)/unet codes --markdown > docs/codes.md
