# pithlog: every target installs into .venv on first use (and again when pyproject.toml changes).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DEMO   := .demo

.PHONY: install bytecode test test-large lint demo bench fuzz vectors docs clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,net,dask]'
	touch $(STAMP)

install: $(STAMP)

# An editable install leaves pithlog uncompiled, and where PYTHONDONTWRITEBYTECODE is set
# every process (helpers included) would compile it again at start: about 0.1 s each.
bytecode: $(STAMP)
	$(PY) -m compileall -q pithlog

test: bytecode
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check pithlog tests vectors bench
	$(VENV)/bin/mypy pithlog

vectors: $(STAMP)
	$(PY) vectors/generate.py

docs: $(STAMP)
	$(PY) scripts/errors_doc.py

demo: bytecode
	$(PY) scripts/demo.py $(DEMO)

test-large: bytecode
	$(PY) -m pytest -q -m large

bench: bytecode
	$(PY) bench/bench.py

# The hostile-input tests with 50 times their budget, and the reducer against the spec's
# model with 1,000 examples a test, then the atheris harness when atheris is installed (it
# is optional: .venv/bin/pip install atheris).
FUZZ_RUNS ?= 200000
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q tests/hostile tests/properties/test_model.py
	@if $(PY) -c "import atheris" 2>/dev/null; then \
		$(PY) tests/hostile/atheris_door.py -atheris_runs=$(FUZZ_RUNS); \
	else \
		echo "fuzz: atheris is not installed; skipping tests/hostile/atheris_door.py"; \
	fi

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache .mypy_cache .ruff_cache .hypothesis
