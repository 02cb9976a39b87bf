PY ?= python3

.PHONY: quickstart test test-all docs readme-table

quickstart:
	bash scripts/setup.sh quickstart
	$(PY) -m hybridrl quickstart --out outputs/quickstart

test:
	bash scripts/setup.sh test
	$(PY) -m pytest

test-all:
	bash scripts/setup.sh test
	$(PY) -m pytest -m ""

docs:
	$(PY) -m mkdocs build --strict --site-dir outputs/site

readme-table:
	$(PY) scripts/readme_table.py --write
