# The two commands of the README:
#   make demo   installs mw into .venv and runs the main job
#   make test   installs mw with its dev tools and runs lint, types and the tests

VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml scripts/setup.sh
	VENV=$(VENV) bash scripts/setup.sh
	touch $@

demo: $(STAMP)
	$(BIN)/mw demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Most tests wait on subprocesses, sockets and signals rather than compute: three
# workers on two cores. A file's tests stay on one worker (its module fixtures run once).
WORKERS ?= 3

test: lint
	bash scripts/browser.sh
	$(BIN)/pytest -n $(WORKERS) --dist loadfile

bench: $(STAMP)
	$(BIN)/python bench/imports.py
	$(BIN)/python bench/actors.py
	$(BIN)/python bench/sandbox.py
	$(BIN)/python bench/meters.py
	$(BIN)/python bench/reserver.py
	OMP_NUM_THREADS=1 $(BIN)/python bench/editing.py
	$(BIN)/python bench/serve_learn.py --split 144
	$(BIN)/python bench/daemon.py
	$(BIN)/python bench/grid.py
	$(BIN)/python bench/attacks.py
	$(BIN)/python bench/learning.py
	$(BIN)/python bench/suite.py

clean:
	rm -rf $(VENV) build *.egg-info
