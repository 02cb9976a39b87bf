PY ?= python3

.PHONY: setup quickstart test test-all

setup:
	bash scripts/setup.sh

quickstart: setup
	$(PY) -m hybridrl quickstart --out outputs/quickstart

test: setup
	$(PY) -m pytest

test-all: setup
	$(PY) -m pytest -m "" 
