# Two commands for a newcomer: `make demo` and `make test`. Both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

LEAFLET := aggregator/serve/dashboard/static/vendor/leaflet/leaflet.js

$(BIN)/aggregator: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

# the dashboard's map: Leaflet from the npm registry, checked against its pinned integrity
$(LEAFLET): tools/vendor_leaflet.py
	$(PY) tools/vendor_leaflet.py

.PHONY: install demo test lint bench
install: $(BIN)/aggregator $(LEAFLET)

demo: install
	$(BIN)/aggregator demo

test: install
	$(BIN)/ruff check aggregator tests bench tools
	$(BIN)/ruff format --check aggregator tests bench tools
	$(BIN)/mypy
	$(BIN)/pytest -n auto -q

bench: install
	$(BIN)/python bench/harvest_oaipmh.py --records 100000
