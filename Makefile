# pithlog: every target installs into .venv on first use (and again when pyproject.toml changes).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DEMO   := .demo

.PHONY: install test lint demo bench fuzz vectors docs clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check pithlog tests vectors bench
	$(VENV)/bin/mypy pithlog

vectors: $(STAMP)
	$(PY) vectors/generate.py

docs: $(STAMP)
	$(PY) scripts/errors_doc.py

demo: $(STAMP)
	$(PY) scripts/demo.py $(DEMO)

bench: $(STAMP)
	$(PY) bench/bench.py

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache .mypy_cache .ruff_cache .hypothesis
