# Two commands do everything on a fresh machine:
#   make demo   - build .venv, install minigraph (C kernels included), run the main job
#   make test   - build .venv, install minigraph with every test extra, run the whole suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: demo test tour lint asan fuzz fuzz-asan clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel cffi

$(VENV)/.demo: $(VENV)/bin/python pyproject.toml setup.py
	$(PY) -m pip install -q -e ".[examples,viz]"
	touch $@

$(VENV)/.test: $(VENV)/bin/python pyproject.toml setup.py
	$(PY) -m pip install -q -e ".[test,oracle,examples,viz,opencl-pocl,mpi,dev]"
	$(PY) -m pip install -q --no-deps "tf_keras==2.21.0"
	touch $@ $(VENV)/.demo

# Each first says whether the C kernels were built (`pip install -q` hides a failed build):
# a WARNING with the reason when not. Under CI (CI=true, as .ci/run sets) `make test` fails
# instead when any component CI installs is missing (C kernels, graphviz's dot, an OpenCL
# device), so no test skips silently for lack of one; elsewhere it warns and goes on, and
# pytest -rs lists every skipped test with its reason at the end.
CI_STRICT := $(if $(filter true TRUE 1 yes,$(CI)),--strict)

demo: $(VENV)/.demo
	@$(PY) -m minigraph check native
	$(PY) -m minigraph demo

tour: $(VENV)/.demo
	@$(PY) -m minigraph check native
	$(PY) -m minigraph tour

# The OpenCL suite runs in its own process: TensorFlow's LLVM breaks PoCL's compiler once TF
# has run (tests/conftest.py deselects it from mixed runs).
test: $(VENV)/.test
	@$(PY) -m minigraph check $(CI_STRICT)
	$(PY) -m pytest -q -rs
	$(PY) -m pytest -q -rs tests/test_opencl.py

# A longer bad-input fuzz campaign than the one in `make test` (tests/test_fuzz.py): every op,
# then the hostile-file families with megabyte inputs (tests/fuzz/hostile.py).
fuzz: $(VENV)/.test
	$(PY) -m tests.fuzz.run --cases 200
	$(PY) -m tests.fuzz.hostile --cases 100 --scale 4

# The same campaign on the native kernels built with ASan + UBSan (into build/asan/, never over
# minigraph/_native*.so; tests/fuzz/sanitized.py). `make test` runs a short one
# (tests/test_fuzz_sanitized.py).
FUZZ_ASAN_CASES ?= 200
fuzz-asan: $(VENV)/.test
	$(PY) -m tests.fuzz.sanitized --cases $(FUZZ_ASAN_CASES) $(FUZZ_ASAN_ARGS)

lint: $(VENV)/.test
	$(PY) -m ruff check minigraph tests benchmarks examples docs

asan:
	$(MAKE) -C kernels_c asan

clean:
	rm -rf $(VENV) build *.egg-info minigraph/_native*.so
