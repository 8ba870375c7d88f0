# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
# GPU users: make test TORCH_SPEC="torch==2.13.0 --index-url <your CUDA wheel index>" (or any CUDA torch).
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sago-installed

.PHONY: venv demo test lint bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e ".[dev]"
	@if $(PY) -m pip show onnxruntime >/dev/null 2>&1; then \
	  echo "error: the CPU 'onnxruntime' wheel is installed beside onnxruntime-gpu; remove it" >&2; exit 1; fi
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/sago demo

test: $(STAMP)
	$(PY) -m pytest -q tests

lint: $(STAMP)
	$(VENV)/bin/ruff check sago_fast tests benchmarks
	$(VENV)/bin/ruff format --check sago_fast tests benchmarks

bench: $(STAMP)
	$(PY) benchmarks/bench_probe.py
	$(PY) benchmarks/bench_kernels.py --quick
	$(PY) benchmarks/bench_run.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
