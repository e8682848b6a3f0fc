# Two commands do everything on a fresh machine:
#   make demo   - build .venv, install minigraph, run the main job
#   make test   - build .venv, install minigraph with the test/oracle extras, run the suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
EXTRAS ?= test,oracle,viz,examples,opencl-pocl,dev

.PHONY: demo test install clean lint

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel cffi
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(PY) -m minigraph demo

test: install
	$(PY) -m pytest -q

lint: install
	$(PY) -m ruff check minigraph tests benchmarks examples

clean:
	rm -rf $(VENV) build *.egg-info minigraph/_native*.so
