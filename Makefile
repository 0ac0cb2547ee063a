# Two commands for a newcomer: `make demo` and `make test`. Both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

LEAFLET := aggregator/serve/dashboard/static/vendor/leaflet/leaflet.js
WORLD := aggregator/serve/dashboard/static/vendor/world/world-110m.geojson

$(BIN)/aggregator: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

# the dashboard's map: Leaflet from the npm registry, checked against its pinned integrity
$(LEAFLET): tools/vendor_leaflet.py
	$(PY) tools/vendor_leaflet.py

# the map's world outline (Natural Earth 1:110m via world-atlas), checked the same way
$(WORLD): tools/vendor_world.py
	$(PY) tools/vendor_world.py

.PHONY: install demo test lint bench
install: $(BIN)/aggregator $(LEAFLET) $(WORLD)

demo: install
	$(BIN)/aggregator demo

test: install
	$(BIN)/ruff check aggregator tests bench tools
	$(BIN)/ruff format --check aggregator tests bench tools
	$(BIN)/mypy
	$(BIN)/pytest -n auto -q

bench: install
	$(BIN)/python bench/harvest_oaipmh.py --records 100000
